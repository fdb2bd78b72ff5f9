package pushconn

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Test geometry: a model with 4 KV heads of 16 bytes per token, 2 layers
// (4 regions), 64 blocks per region.
const (
	modelHeads = 4
	headBytes  = 16
	numLayers  = 2
	numBlocks  = 64
)

type rigConfig struct {
	preTP, decTP       int
	prePP              int // prefill pipeline stages (0: none), preTP ranks each
	preBlock, decBlock int
	fabric             []loopback.FabricOption
	rank               func(*Config) // applied to every rank's config
	preRank, decRank   func(*Config) // then to one side's
	clock              connector.Clock
	noProducers        bool
	numBlocks          int // per region; default numBlocks
	layers             int // the model's layers; default numLayers
	// newAgent creates the agents (default: loopback agents on the rig's
	// fabric); the rig closes them.
	newAgent func(t testing.TB, name string) nixl.Agent
	// wrap, when set, stands between each agent made on the rig's fabric
	// and its rank (the rig's agent lists hold what it returns).
	wrap func(name string, a nixl.Agent) nixl.Agent
	// vllm runs both engines in vLLM's protocol, with layouts of K and V
	// packed per layer as vLLM's are.
	vllm bool
	// preOrder and decOrder are each engine's block order (Geometry.Order
	// and its ranks' Layout.Order; "" is HND).
	preOrder, decOrder string
}

// rigVLLM is the vLLM facts both engines of a vLLM-protocol rig agree on.
var rigVLLM = connector.VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}

// rig is one prefill and one decode engine on a loopback fabric, each TP
// rank with its own agent and KV buffer.
type rig struct {
	t         testing.TB
	fabric    *loopback.Fabric
	clock     *connector.ManualClock
	pre, dec  *connector.Engine
	producers []*Producer
	consumers []*Consumer
	agents    []nixl.Agent // closed by the rig
	preAgents []nixl.Agent
	decAgents []nixl.Agent
	preLayout []descriptors.Layout
	decLayout []descriptors.Layout
}

var rigStart = time.Unix(1_800_000_000, 0)

func newRig(t testing.TB, rc rigConfig) *rig {
	t.Helper()
	if rc.preTP == 0 {
		rc.preTP = 1
	}
	if rc.decTP == 0 {
		rc.decTP = 1
	}
	if rc.preBlock == 0 {
		rc.preBlock = 16
	}
	if rc.decBlock == 0 {
		rc.decBlock = rc.preBlock
	}
	if rc.numBlocks == 0 {
		rc.numBlocks = numBlocks
	}
	if rc.layers == 0 {
		rc.layers = numLayers
	}
	f, err := loopback.NewFabric(rc.fabric...)
	require.NoError(t, err)
	r := &rig{t: t, fabric: f, clock: connector.NewManualClock(rigStart)}
	t.Cleanup(r.close)
	clock := rc.clock
	if clock == nil {
		clock = r.clock
	}
	pg, dg := testGeometry(rc.preTP, rc.preBlock, rc.numBlocks), testGeometry(rc.decTP, rc.decBlock, rc.numBlocks)
	pg.PPSize = rc.prePP
	pg.Layers, dg.Layers = rc.layers, rc.layers
	pg.Order, dg.Order = rc.preOrder, rc.decOrder
	pcfg := connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg}
	dcfg := connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: dg}
	if rc.vllm {
		pg.KVPacked, dg.KVPacked = true, true
		pcfg = connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg, Protocol: connector.ProtocolVLLM, VLLM: rigVLLM, ListenAddr: "127.0.0.1:0"}
		dcfg = connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: dg, Protocol: connector.ProtocolVLLM, VLLM: rigVLLM, ListenAddr: "127.0.0.1:0"}
	}
	r.pre, err = NewEngine(pcfg)
	require.NoError(t, err)
	r.dec, err = NewEngine(dcfg)
	require.NoError(t, err)
	mk := func(side string, tp, rank, block int) (nixl.Agent, descriptors.Layout, Config) {
		var a nixl.Agent
		name := fmt.Sprintf("%s-%d", side, rank)
		if rc.newAgent != nil {
			a = rc.newAgent(t, name)
			r.agents = append(r.agents, a)
		} else {
			a, err = f.NewAgent(name)
			require.NoError(t, err)
			if rc.wrap != nil {
				a = rc.wrap(name, a)
			}
		}
		l := testLayoutOf(t, tp, rank, block, rc.numBlocks, rc.layers)
		if side == "prefill" && rc.prePP > 1 {
			freeLayout(l)
			l = stageTestLayout(t, pg, rank) // rank is the world rank
		}
		if rc.vllm {
			freeLayout(l)
			l = packedLayout(t, tp, rank, block, rc.numBlocks)
		}
		if side == "prefill" {
			l.Order = rc.preOrder
		} else {
			l.Order = rc.decOrder
		}
		cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, Clock: clock, IdleInterval: 5 * time.Millisecond}}
		if rc.rank != nil {
			rc.rank(&cfg)
		}
		return a, l, cfg
	}
	if !rc.noProducers {
		for i := range rc.preTP * max(rc.prePP, 1) {
			a, l, cfg := mk("prefill", rc.preTP, i, rc.preBlock)
			if rc.preRank != nil {
				rc.preRank(&cfg)
			}
			p, err := NewProducer(r.pre, cfg)
			require.NoError(t, err)
			r.preAgents, r.preLayout, r.producers = append(r.preAgents, a), append(r.preLayout, l), append(r.producers, p)
		}
	}
	for i := range rc.decTP {
		a, l, cfg := mk("decode", rc.decTP, i, rc.decBlock)
		if rc.decRank != nil {
			rc.decRank(&cfg)
		}
		c, err := NewConsumer(r.dec, cfg)
		require.NoError(t, err)
		r.decAgents, r.decLayout, r.consumers = append(r.decAgents, a), append(r.decLayout, l), append(r.consumers, c)
	}
	return r
}

func (r *rig) close() {
	for _, p := range r.producers {
		require.NoError(r.t, p.Close())
	}
	for _, c := range r.consumers {
		require.NoError(r.t, c.Close())
	}
	require.NoError(r.t, r.pre.Close())
	require.NoError(r.t, r.dec.Close())
	for _, a := range r.agents {
		require.NoError(r.t, a.Close())
	}
	for _, l := range append(append([]descriptors.Layout{}, r.preLayout...), r.decLayout...) {
		freeLayout(l)
	}
	require.NoError(r.t, r.fabric.Close())
}

// testLayout allocates one rank's KV cache: 2*numLayers regions of
// numBlocks blocks, the rank's share of the model's heads.
func testLayout(t testing.TB, tp, rank, block, blocks int) descriptors.Layout {
	return testLayoutOf(t, tp, rank, block, blocks, numLayers)
}

// testLayoutOf is testLayout for a model of layers layers.
func testLayoutOf(t testing.TB, tp, rank, block, blocks, layers int) descriptors.Layout {
	t.Helper()
	l := descriptors.Layout{
		Mem: nixl.DRAM, NumLayers: layers, NumBlocks: blocks, BlockSize: block,
		KVHeads: modelHeads / tp, HeadBytes: headBytes, DType: "bfloat16", TPRank: rank, TPSize: tp,
	}
	buf, err := nixl.AllocBuffer(int(l.BlockLen()) * blocks * 2 * layers)
	require.NoError(t, err)
	for i := range 2 * layers {
		l.Regions = append(l.Regions, descriptors.Region{Base: buf.Addr() + uint64(i)*l.RegionLen()})
	}
	layoutBufs[l.Regions[0].Base] = buf
	return l
}

var layoutBufs = map[uint64]*nixl.Buffer{}

// packedLayout allocates one rank's KV cache as vLLM lays it out: one
// region per layer, K and V packed per head and token.
func packedLayout(t testing.TB, tp, rank, block, blocks int) descriptors.Layout {
	t.Helper()
	g := testGeometry(tp, block, blocks)
	g.KVPacked = true
	buf, err := nixl.AllocBuffer(int(g.RankBytes()))
	require.NoError(t, err)
	l, err := g.Layout(nixl.DRAM, rank, buf.RegDesc().Desc)
	require.NoError(t, err)
	layoutBufs[l.Regions[0].Base] = buf
	return l
}

func freeLayout(l descriptors.Layout) {
	if b := layoutBufs[l.Regions[0].Base]; b != nil {
		_ = b.Free()
		delete(layoutBufs, l.Regions[0].Base)
	}
}

// kvByte is the test's KV cache content: a function of the request, the
// region, the model head, the token and the byte, so a copy to the wrong
// place shows.
func kvByte(seed, region, head, token, b int) byte {
	x := uint32(seed)*2654435761 ^ uint32(region)*40503 ^ uint32(head)*97 ^ uint32(token)*131 ^ uint32(b)*7
	x ^= x >> 13
	x *= 0x5bd1e995
	return byte(x ^ x>>15)
}

// visit calls f for every byte of the first tokens tokens that blocks
// (starting at token firstToken) hold on layout l.
func visit(t testing.TB, l descriptors.Layout, blocks []int, firstToken, tokens int, f func(p *byte, region, head, token, b int)) {
	t.Helper()
	for region := range l.NumRegions() {
		for i, blk := range blocks {
			desc := l.BlockDesc(region, blk)
			mem, err := nixl.HostBytes(desc.Addr, desc.Len)
			require.NoError(t, err)
			for hh := range l.KVHeads {
				for tok := range l.BlockSize {
					token := firstToken + i*l.BlockSize + tok
					if token >= tokens {
						continue
					}
					in := hh*l.BlockSize + tok // head-major
					if l.Order == descriptors.OrderNHD {
						in = tok*l.KVHeads + hh // token-major
					}
					for b := range l.HeadBytes {
						off := in*l.HeadBytes + b
						f(&mem[off], region, l.FirstHead()+hh, token, b)
					}
				}
			}
		}
	}
}

// fill writes request seed's KV content into prefill blocks.
func fill(t testing.TB, l descriptors.Layout, blocks []int, seed, tokens int) {
	visit(t, l, blocks, 0, tokens, func(p *byte, region, head, token, b int) { *p = kvByte(seed, region, head, token, b) })
}

// check verifies decode blocks (after cached leading blocks) hold request
// seed's KV content; it returns the bytes checked.
func check(t testing.TB, l descriptors.Layout, blocks []int, cached, seed, tokens int) int {
	n := 0
	var bad error
	visit(t, l, blocks, cached*l.BlockSize, tokens, func(p *byte, region, head, token, b int) {
		n++
		if want := kvByte(seed, region, head, token, b); *p != want && bad == nil {
			bad = fmt.Errorf("region %d head %d token %d byte %d: got %#x, want %#x", region, head, token, b, *p, want)
		}
	})
	require.NoError(t, bad)
	return n
}

// clear zeroes decode blocks so a later check proves a fresh copy.
func zero(t testing.TB, l descriptors.Layout, blocks []int) {
	visit(t, l, blocks, 0, 1<<30, func(p *byte, _, _, _, _ int) { *p = 0 })
}

// await returns the next n results of consumer c, failing after 10 s.
func await(t testing.TB, c *Consumer, n int) []connector.Result {
	t.Helper()
	var out []connector.Result
	deadline := time.After(10 * time.Second)
	for len(out) < n {
		out = append(out, c.Drain()...)
		if len(out) >= n {
			break
		}
		select {
		case <-c.Ready():
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatalf("got %d of %d results: %+v", len(out), n, out)
		}
	}
	return out
}

// eventually polls cond every millisecond for up to 10 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// freedOnce collects DrainFreed ids until want are all there and checks
// that nothing is freed twice.
func freedOnce(t testing.TB, p *Producer, want ...string) {
	t.Helper()
	seen := map[string]int{}
	eventually(t, fmt.Sprintf("freed %v", want), func() bool {
		for _, id := range p.DrainFreed() {
			seen[id]++
		}
		for _, id := range want {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(5 * time.Millisecond)
	for _, id := range p.DrainFreed() {
		seen[id]++
	}
	want2 := map[string]int{}
	for _, id := range want {
		want2[id] = 1
	}
	require.Equal(t, want2, seen, "each request freed exactly once")
}

func extra(t testing.TB, s interface{ Get(string) (uint64, bool) }, name string) uint64 {
	t.Helper()
	v, ok := s.Get(name)
	require.True(t, ok, "counter %s exists", name)
	return v
}

func blocksFrom(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

func isPushFail(err error, kind string) bool {
	var pe *PushError
	return errors.As(err, &pe) && pe.Kind == kind && errors.Is(err, ErrPushFailed)
}

// admitted waits until prefill rank p has received n registrations and
// finished its handshake with the decode engine, so they are in its
// matcher before anything the test does next.
func admitted(t testing.TB, p *Producer, n uint64) {
	t.Helper()
	eventually(t, "registrations admitted", func() bool {
		s := p.Stats()
		return extra(t, s, "registrations_received") >= n && extra(t, s, "handshakes") >= 1
	})
}

// testGeometry is the geometry of testLayout's layouts.
func testGeometry(tp, block, blocks int) descriptors.Geometry {
	return descriptors.Geometry{Layers: numLayers, KVHeads: modelHeads, HeadDim: headBytes / 2, DType: "bfloat16",
		BlockSize: block, Blocks: blocks, TPSize: tp}
}
