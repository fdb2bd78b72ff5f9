package pullconn

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/latency"
	"github.com/gonixl/gonixl/internal/loadgen"
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
	benchStep      = time.Millisecond // the simulated engine step
)

type benchRank struct {
	agent  *loopback.Agent
	buf    *nixl.Buffer
	layout descriptors.Layout
}

func benchLayout(buf *nixl.Buffer) descriptors.Layout {
	l := descriptors.Layout{Mem: nixl.DRAM, NumLayers: 2, NumBlocks: benchBlocks, BlockTokens: 16,
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
	pe, de *Engine
	prod   *Producer
	cons   *Consumer
	ranks  []*benchRank
}

func newBenchPair(b testing.TB, model loopback.TransferModel, inline bool) *benchPair {
	fab, err := loopback.NewFabric(loopback.WithModel(model))
	require.NoError(b, err)
	bp := &benchPair{fab: fab}
	bp.pe, err = NewEngine(EngineConfig{EngineID: "prefill", Model: "m", DType: "bfloat16", TPSize: 1, BlockSize: 16})
	require.NoError(b, err)
	bp.de, err = NewEngine(EngineConfig{EngineID: "decode", Model: "m", DType: "bfloat16", TPSize: 1, BlockSize: 16})
	require.NoError(b, err)
	pr, dr := newBenchRank(b, fab, "prefill-0"), newBenchRank(b, fab, "decode-0")
	bp.ranks = []*benchRank{pr, dr}
	bp.prod, err = NewProducer(bp.pe, RankConfig{Agent: pr.agent, Layout: pr.layout, StatsInterval: -1})
	require.NoError(b, err)
	bp.cons, err = NewConsumer(bp.de, RankConfig{Agent: dr.agent, Layout: dr.layout, Inline: inline, StatsInterval: -1})
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

// benchRuns numbers runCriticalPath calls.
var benchRuns atomic.Int64

type benchResult struct {
	critical latency.Recorder // RequestFinished -> result drained on decode
	load     latency.Recorder // Consumer.Load per request, on the engine loop
	drain    latency.Recorder // Consumer.Drain per engine step
}

// runCriticalPath issues n requests at rate (requests/s, Poisson; 0 = all
// at once) through one prefill rank and one decode rank. Prefill finishes
// each request and hands its params straight to decode's engine loop, whose
// steps call Load for the requests that arrived, sleep benchStep (the
// forward pass), then call Drain, as vLLM calls start_load_kv before and
// get_finished after the forward pass. The prefill side's freed ids are
// drained every step too.
func runCriticalPath(b testing.TB, bp *benchPair, n int, rate float64) *benchResult {
	type arrival struct {
		id     string
		params Params
		local  []int
		start  time.Time
		failed bool
	}
	run := benchRuns.Add(1)
	res := &benchResult{}
	arrivals := make(chan arrival, n)
	started := make(map[string]time.Time, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // decode engine loop
		defer wg.Done()
		done := 0
		for done < n {
			// A step: start loading the requests that arrived, run the
			// forward pass (a sleep that starts after the Loads, so Inline
			// posting lengthens the step), then collect finished loads.
		intake:
			for {
				select {
				case a := <-arrivals:
					if a.failed {
						done++
						continue
					}
					started[a.id] = a.start
					t0 := time.Now()
					if err := bp.cons.Load(a.id, a.params, a.local); err != nil {
						b.Errorf("load %s: %v", a.id, err)
						done++
						continue
					}
					res.load.Add(time.Since(t0))
				default:
					break intake
				}
			}
			time.Sleep(benchStep)
			t0 := time.Now()
			out := bp.cons.Drain()
			res.drain.Add(time.Since(t0))
			now := time.Now()
			for _, r := range out {
				if r.Err != nil {
					b.Errorf("request %s failed: %v", r.RequestID, r.Err)
				} else {
					res.critical.Add(now.Sub(started[r.RequestID]))
				}
				done++
			}
			bp.prod.DrainFreed()
		}
	}()
	err := loadgen.Run(context.Background(), loadgen.Arrivals{Rate: rate, Poisson: true, Seed: 1}, n, func(i int) {
		// Ids are unique across runs: prefill may not have seen the last
		// run's completions yet.
		id := fmt.Sprintf("run%d-r%d", run, i)
		first := (i * benchReqBlocks) % (benchBlocks - benchReqBlocks)
		blocks := blocksFrom(first, benchReqBlocks)
		start := time.Now()
		p, err := bp.prod.RequestFinished(id, blocks)
		if err != nil {
			b.Errorf("finish %s: %v", id, err)
			arrivals <- arrival{failed: true}
			return
		}
		arrivals <- arrival{id: id, params: p, local: blocks, start: start}
	})
	require.NoError(b, err)
	wg.Wait()
	return res
}

func report(b *testing.B, res *benchResult) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	c := res.critical.Summary()
	l := res.load.Summary()
	d := res.drain.Summary()
	b.ReportMetric(us(c.P50), "p50-us")
	b.ReportMetric(us(c.P99), "p99-us")
	b.ReportMetric(us(l.P50), "load-p50-us")
	b.ReportMetric(us(l.P99), "load-p99-us")
	b.ReportMetric(us(d.P50), "drain-p50-us")
	b.ReportMetric(us(d.P99), "drain-p99-us")
}

// BenchmarkCriticalPath measures RequestFinished on prefill -> result
// drained on decode, one request per b.N, at several arrival rates, on an
// instant link and on a modeled 10 GB/s + 20 us link, with the background
// reader and with Inline posting. It also reports the engine-loop cost:
// Consumer.Load per request and Consumer.Drain per step. Run with
// -benchtime=Nx (N requests).
func BenchmarkCriticalPath(b *testing.B) {
	models := []struct {
		name string
		m    loopback.TransferModel
	}{
		{"instant", loopback.Instant()},
		{"link10GBps", loopback.Bandwidth(10e9, 20*time.Microsecond)},
	}
	for _, m := range models {
		for _, mode := range []struct {
			name   string
			inline bool
		}{{"background", false}, {"inline", true}} {
			for _, rate := range []float64{100, 500, 2000} {
				b.Run(fmt.Sprintf("%s/%s/rate%.0f", m.name, mode.name, rate), func(b *testing.B) {
					bp := newBenchPair(b, m.m, mode.inline)
					defer bp.close()
					// Warm up: the first request pays for the handshake.
					runCriticalPath(b, bp, 1, 0)
					b.ResetTimer()
					res := runCriticalPath(b, bp, b.N, rate)
					b.StopTimer()
					report(b, res)
				})
			}
		}
	}
}

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
			runCriticalPath(b, bp, 1, 0) // handshake
			run := benchRuns.Add(1)
			var cost latency.Recorder
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("loop%d-%d", run, i)
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
				cost.Add(spent)
				bp.prod.DrainFreed()
			}
			b.StopTimer()
			s := cost.Summary()
			b.ReportMetric(float64(s.P50)/float64(time.Microsecond), "loop-p50-us")
			b.ReportMetric(float64(s.P99)/float64(time.Microsecond), "loop-p99-us")
		})
	}
}
