package pullconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Test geometry: 2 layers, 4 KV heads in the model, 8 bytes per head per token.
const (
	testLayers    = 2
	testHeads     = 4
	testHeadBytes = 8
	testBlocks    = 64
)

type side struct {
	tp, bs int
}

type clusterOpts struct {
	prefill, decode side
	fabric          []loopback.FabricOption
	prefillCfg      func(*Config)
	decodeCfg       func(*Config)
	decodeEngine    func(*connector.EngineConfig)
	prefillEngine   func(*connector.EngineConfig)
	// vllm runs both engines in vLLM's protocol, with layouts of K and V
	// packed per layer as vLLM's are.
	vllm bool
	// prefillOrder and decodeOrder are each engine's block order
	// (Geometry.Order and its ranks' Layout.Order; "" is HND).
	prefillOrder, decodeOrder string
	// newAgent creates the agents (default: loopback agents on the
	// cluster's fabric); the cluster closes them.
	newAgent func(t *testing.T, name string) nixl.Agent
	// wrap, when set, stands between each agent newAgent made and its
	// rank (the cluster's agent lists hold what it returns).
	wrap func(name string, a nixl.Agent) nixl.Agent
}

// cluster is one prefill engine and one decode engine, each with a Producer
// or Consumer per TP rank, on one loopback fabric.
type cluster struct {
	t        *testing.T
	fab      *loopback.Fabric
	pe, de   *connector.Engine
	prods    []*Producer
	cons     []*Consumer
	pagents  []nixl.Agent
	dagents  []nixl.Agent
	pbufs    []*nixl.Buffer
	dbufs    []*nixl.Buffer
	playouts []descriptors.Layout
	dlayouts []descriptors.Layout
}

// addresser is what newLayout needs of a buffer.
type addresser interface{ Addr() uint64 }

func newLayout(buf addresser, rank, tp, bs int) descriptors.Layout {
	l := descriptors.Layout{
		Mem: nixl.DRAM, NumLayers: testLayers, NumBlocks: testBlocks, BlockSize: bs,
		KVHeads: testHeads / tp, HeadBytes: testHeadBytes, DType: "bfloat16", TPRank: rank, TPSize: tp,
	}
	for i := 0; i < l.NumRegions(); i++ {
		l.Regions = append(l.Regions, descriptors.Region{Base: buf.Addr() + uint64(i)*l.RegionLen()})
	}
	return l
}

// testGeometry is the geometry of newLayout's layouts.
func testGeometry(tp, bs int) descriptors.Geometry {
	return descriptors.Geometry{Layers: testLayers, KVHeads: testHeads, HeadDim: testHeadBytes / 2, DType: "bfloat16",
		BlockSize: bs, Blocks: testBlocks, TPSize: tp}
}

func layoutBytes(tp, bs int) int {
	return 2 * testLayers * testBlocks * bs * (testHeads / tp) * testHeadBytes
}

func (o *clusterOpts) defaults() {
	if o.prefill.tp == 0 {
		o.prefill = side{1, 16}
	}
	if o.decode.tp == 0 {
		o.decode = side{1, 16}
	}
}

func newCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	o.defaults()
	fab, err := loopback.NewFabric(o.fabric...)
	require.NoError(t, err)
	c := &cluster{t: t, fab: fab}
	t.Cleanup(c.close)
	if o.newAgent == nil {
		o.newAgent = func(t *testing.T, name string) nixl.Agent {
			a, err := fab.NewAgent(name)
			require.NoError(t, err)
			return a
		}
	}
	if wrap := o.wrap; wrap != nil {
		made := o.newAgent
		o.newAgent = func(t *testing.T, name string) nixl.Agent { return wrap(name, made(t, name)) }
	}

	// Each engine runs on the clock its ranks use, as RankConfig.Clock
	// requires.
	rankClock := func(apply func(*Config)) connector.Clock {
		var probe Config
		if apply != nil {
			apply(&probe)
		}
		return probe.Clock
	}
	pg, dg := testGeometry(o.prefill.tp, o.prefill.bs), testGeometry(o.decode.tp, o.decode.bs)
	pg.KVPacked, dg.KVPacked = o.vllm, o.vllm
	pg.Order, dg.Order = o.prefillOrder, o.decodeOrder
	pcfg := connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg, Clock: rankClock(o.prefillCfg)}
	dcfg := connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: dg, HandshakeTimeout: 2 * time.Second, Clock: rankClock(o.decodeCfg)}
	if o.vllm {
		v := connector.VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}
		pcfg.Protocol, pcfg.VLLM, dcfg.Protocol, dcfg.VLLM = connector.ProtocolVLLM, v, connector.ProtocolVLLM, v
	}
	if o.prefillEngine != nil {
		o.prefillEngine(&pcfg)
	}
	c.pe, err = NewEngine(pcfg)
	require.NoError(t, err)
	if o.decodeEngine != nil {
		o.decodeEngine(&dcfg)
	}
	c.de, err = NewEngine(dcfg)
	require.NoError(t, err)

	for r := 0; r < o.prefill.tp; r++ {
		a := o.newAgent(t, fmt.Sprintf("prefill-%d", r))
		buf, err := nixl.AllocBuffer(layoutBytes(o.prefill.tp, o.prefill.bs))
		require.NoError(t, err)
		l := newLayout(buf, r, o.prefill.tp, o.prefill.bs)
		l.Order = o.prefillOrder
		if o.vllm {
			l, err = pg.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
			require.NoError(t, err)
		}
		cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}}
		if o.prefillCfg != nil {
			o.prefillCfg(&cfg)
		}
		p, err := NewProducer(c.pe, cfg)
		require.NoError(t, err)
		c.pagents, c.pbufs, c.playouts, c.prods = append(c.pagents, a), append(c.pbufs, buf), append(c.playouts, l), append(c.prods, p)
	}
	for r := 0; r < o.decode.tp; r++ {
		a := o.newAgent(t, fmt.Sprintf("decode-%d", r))
		buf, err := nixl.AllocBuffer(layoutBytes(o.decode.tp, o.decode.bs))
		require.NoError(t, err)
		l := newLayout(buf, r, o.decode.tp, o.decode.bs)
		l.Order = o.decodeOrder
		if o.vllm {
			l, err = dg.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
			require.NoError(t, err)
		}
		cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}}
		if o.decodeCfg != nil {
			o.decodeCfg(&cfg)
		}
		cn, err := NewConsumer(c.de, cfg)
		require.NoError(t, err)
		c.dagents, c.dbufs, c.dlayouts, c.cons = append(c.dagents, a), append(c.dbufs, buf), append(c.dlayouts, l), append(c.cons, cn)
	}
	return c
}

func (c *cluster) close() {
	for _, p := range c.prods {
		p.Close()
	}
	for _, cn := range c.cons {
		cn.Close()
	}
	if c.pe != nil {
		c.pe.Close()
	}
	if c.de != nil {
		c.de.Close()
	}
	for _, a := range append(c.pagents, c.dagents...) {
		a.Close()
	}
	for _, b := range append(c.pbufs, c.dbufs...) {
		b.Free()
	}
	c.fab.Close()
}

// value is the byte at position i of head h (model index), token t, region
// g of request seed.
func value(seed, g, h, t, i int) byte {
	x := uint32(seed)*2654435761 ^ uint32(g)*40503 ^ uint32(h)*9176 ^ uint32(t)*31337 ^ uint32(i)*7
	x ^= x >> 13
	x *= 0x5bd1e995
	return byte(x ^ x>>15)
}

// tokenBytes returns the bytes of (region g, local head h, token t) in a
// rank's memory, where blocks hold the request's tokens from token first:
// head-major in the block, or token-major for an NHD layout.
func tokenBytes(buf *nixl.Buffer, l *descriptors.Layout, blocks []int, first, g, h, t int) []byte {
	rel := t - first
	b := blocks[rel/l.BlockSize]
	in := h*l.BlockSize + rel%l.BlockSize
	if l.Order == descriptors.OrderNHD {
		in = (rel%l.BlockSize)*l.KVHeads + h
	}
	off := uint64(g)*l.RegionLen() + uint64(b)*l.BlockLen() + uint64(in*l.HeadBytes)
	return buf.Bytes()[off : off+uint64(l.HeadBytes)]
}

// fill writes request seed's tokens into every prefill rank's blocks.
func (c *cluster) fill(seed int, blocks []int, tokens int) {
	for r, l := range c.playouts {
		for g := 0; g < l.NumRegions(); g++ {
			for h := 0; h < l.KVHeads; h++ {
				for t := 0; t < tokens; t++ {
					dst := tokenBytes(c.pbufs[r], &l, blocks, 0, g, h, t)
					for i := range dst {
						dst[i] = value(seed, g, l.FirstHead()+h, t, i)
					}
				}
			}
		}
	}
}

// verify checks that every decode rank holds request seed's tokens from
// token first on, in blocks.
func (c *cluster) verify(seed int, blocks []int, first, tokens int) {
	c.t.Helper()
	for r, l := range c.dlayouts {
		for g := 0; g < l.NumRegions(); g++ {
			for h := 0; h < l.KVHeads; h++ {
				for t := first; t < tokens; t++ {
					got := tokenBytes(c.dbufs[r], &l, blocks, first, g, h, t)
					for i := range got {
						if want := value(seed, g, l.FirstHead()+h, t, i); got[i] != want {
							c.t.Fatalf("decode rank %d region %d head %d token %d byte %d: got %#x, want %#x", r, g, l.FirstHead()+h, t, i, got[i], want)
						}
					}
				}
			}
		}
	}
}

// finish calls RequestFinished on every prefill rank and returns rank 0's
// params, checking that all ranks agree.
func (c *cluster) finish(id string, blocks []int) Params {
	c.t.Helper()
	var first Params
	for i, p := range c.prods {
		params, err := p.RequestFinished(id, blocks)
		require.NoError(c.t, err)
		if i == 0 {
			first = params
		} else {
			require.Equal(c.t, first, params)
		}
	}
	return first
}

// load calls Load on every decode rank.
func (c *cluster) load(id string, p Params, local []int) {
	c.t.Helper()
	for _, cn := range c.cons {
		require.NoError(c.t, cn.Load(id, p, local))
	}
}

// results collects results from every decode rank until n per rank have
// arrived, and fails the test on a second result for any (rank, request).
func (c *cluster) results(n int) []map[string]connector.Result {
	c.t.Helper()
	out := make([]map[string]connector.Result, len(c.cons))
	for i := range out {
		out[i] = map[string]connector.Result{}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		doneAll := true
		for i, cn := range c.cons {
			for _, r := range cn.Drain() {
				if _, dup := out[i][r.RequestID]; dup {
					c.t.Fatalf("decode rank %d: second result for %q", i, r.RequestID)
				}
				out[i][r.RequestID] = r
			}
			if len(out[i]) < n {
				doneAll = false
			}
		}
		if doneAll {
			return out
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %d results per rank, have %d", n, len(out[0]))
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// result waits for request id's result on every decode rank.
func (c *cluster) result(id string) []connector.Result {
	c.t.Helper()
	rs := c.results(1)
	out := make([]connector.Result, len(rs))
	for i, m := range rs {
		r, ok := m[id]
		require.True(c.t, ok, "rank %d ended %v, not %q", i, m, id)
		out[i] = r
	}
	return out
}

// freed collects freed ids from every prefill rank until each has freed n,
// failing on any id freed twice by one rank.
func (c *cluster) freed(n int) []map[string]int {
	c.t.Helper()
	out := make([]map[string]int, len(c.prods))
	for i := range out {
		out[i] = map[string]int{}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		all := true
		for i, p := range c.prods {
			for _, id := range p.DrainFreed() {
				out[i][id]++
				if out[i][id] > 1 {
					c.t.Fatalf("prefill rank %d freed %q twice", i, id)
				}
			}
			if len(out[i]) < n {
				all = false
			}
		}
		if all {
			return out
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %d freed ids per prefill rank, have %v", n, out)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// settle gives the pollers a few rounds, for tests that assert that nothing
// more happens.
func settle() { time.Sleep(30 * time.Millisecond) }

func itoa(n int) string { return fmt.Sprint(n) }

var nopLogger = zap.NewNop()

func newStatsForTest() *stats.Set { return stats.New() }

// pullOf returns the pull state of an engine made by NewEngine.
func pullOf(t testing.TB, e *connector.Engine) *pullEngine {
	t.Helper()
	pe, err := engineOf(e)
	require.NoError(t, err)
	return pe
}
