package pullconn

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/latency"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Benchmark geometry: 2 layers, 4 KV heads of 128 bytes per token, blocks of
// 16 tokens: 8 KiB per block per region, 32 KiB per block over the 4
// regions; a request of 32 blocks (512 tokens) moves 1 MiB.
const (
	benchHeadBytes = 128
	benchBlocks    = 2048
	benchReqBlocks = 32
)

type benchRank struct {
	agent  *loopback.Agent
	buf    *nixl.Buffer
	layout descriptors.Layout
}

func benchLayout(buf *nixl.Buffer) descriptors.Layout {
	l := descriptors.Layout{Mem: nixl.DRAM, NumLayers: 2, NumBlocks: benchBlocks, BlockSize: 16,
		KVHeads: 4, HeadBytes: benchHeadBytes, DType: "bfloat16", TPSize: 1}
	for i := 0; i < l.NumRegions(); i++ {
		l.Regions = append(l.Regions, descriptors.Region{Base: buf.Addr() + uint64(i)*l.RegionLen()})
	}
	return l
}

func newBenchRank(b testing.TB, fab *loopback.Fabric, name string) *benchRank {
	a, err := fab.NewAgent(name)
	require.NoError(b, err)
	buf, err := nixl.AllocBuffer(2 * 2 * benchBlocks * 16 * 4 * benchHeadBytes)
	require.NoError(b, err)
	return &benchRank{agent: a, buf: buf, layout: benchLayout(buf)}
}

// benchPair is one prefill rank and one decode rank.
type benchPair struct {
	fab    *loopback.Fabric
	pe, de *connector.Engine
	prod   *Producer
	cons   *Consumer
	ranks  []*benchRank
}

func newBenchPair(b testing.TB, model loopback.TransferModel, inline bool) *benchPair {
	fab, err := loopback.NewFabric(loopback.WithModel(model))
	require.NoError(b, err)
	bp := &benchPair{fab: fab}
	bp.pe, err = NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: testGeometry(1, 16)})
	require.NoError(b, err)
	bp.de, err = NewEngine(connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: testGeometry(1, 16)})
	require.NoError(b, err)
	pr, dr := newBenchRank(b, fab, "prefill-0"), newBenchRank(b, fab, "decode-0")
	bp.ranks = []*benchRank{pr, dr}
	bp.prod, err = NewProducer(bp.pe, Config{RankConfig: connector.RankConfig{Agent: pr.agent, Layout: pr.layout, StatsInterval: -1}})
	require.NoError(b, err)
	bp.cons, err = NewConsumer(bp.de, Config{RankConfig: connector.RankConfig{Agent: dr.agent, Layout: dr.layout, StatsInterval: -1}, Inline: inline})
	require.NoError(b, err)
	return bp
}

func (bp *benchPair) close() {
	bp.prod.Close()
	bp.cons.Close()
	bp.pe.Close()
	bp.de.Close()
	for _, r := range bp.ranks {
		r.agent.Close()
		r.buf.Free()
	}
	bp.fab.Close()
}

// benchRuns keeps request ids unique across benchmark runs: prefill may
// not have seen the last run's completions yet.
var benchRuns atomic.Int64

// The critical path, pull next to push, is measured in internal/critbench.

// BenchmarkEngineLoop measures the engine-loop cost of one request on
// decode: the time spent inside Consumer.Load plus the Drain calls until its
// result comes out (time between calls, when the engine would run its
// forward pass, is not counted), with the background reader and Inline, on
// the instant link. ns/op is the wall time per request including waits;
// loop-p50-us and loop-p99-us are the engine-loop cost.
func BenchmarkEngineLoop(b *testing.B) {
	for _, mode := range []struct {
		name   string
		inline bool
	}{{"background", false}, {"inline", true}} {
		b.Run(mode.name, func(b *testing.B) {
			bp := newBenchPair(b, loopback.Instant(), mode.inline)
			defer bp.close()
			run := benchRuns.Add(1)
			// one moves one request and returns the time spent inside Load and
			// Drain.
			one := func(kind string, i int) time.Duration {
				id := fmt.Sprintf("%s%d-%d", kind, run, i)
				blocks := blocksFrom((i*benchReqBlocks)%(benchBlocks-benchReqBlocks), benchReqBlocks)
				p, err := bp.prod.RequestFinished(id, blocks)
				require.NoError(b, err)
				t0 := time.Now()
				require.NoError(b, bp.cons.Load(id, p, blocks))
				spent := time.Since(t0)
				for done := false; !done; {
					t0 = time.Now()
					out := bp.cons.Drain()
					spent += time.Since(t0)
					for _, r := range out {
						require.NoError(b, r.Err)
						done = true
					}
					if !done {
						time.Sleep(20 * time.Microsecond)
					}
				}
				bp.prod.DrainFreed()
				return spent
			}
			one("warm", 0) // the first request pays for the handshake
			var cost latency.Recorder
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cost.Add(one("loop", i))
			}
			b.StopTimer()
			s := cost.Summary()
			b.ReportMetric(float64(s.P50)/float64(time.Microsecond), "loop-p50-us")
			b.ReportMetric(float64(s.P99)/float64(time.Microsecond), "loop-p99-us")
		})
	}
}
