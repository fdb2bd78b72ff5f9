package pushconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// stageLayers is the model of the pipeline tests: 3 layers, so that PP 2
// splits it unevenly (layers 0-1, then layer 2).
const stageLayers = 3

// stageGeometry is the stage rig's model: testGeometry's heads and blocks
// with stageLayers layers, pp stages.
func stageGeometry(tp, pp int) descriptors.Geometry {
	g := testGeometry(tp, 16, numBlocks)
	g.Layers, g.PPSize = stageLayers, pp
	return g
}

// stageRig is a prefill engine of pp stages x preTP ranks and a decode
// engine of decTP ranks on one loopback fabric. Prefill agents are named
// "prefill-<world rank>".
type stageRig struct {
	t         testing.TB
	fabric    *loopback.Fabric
	clock     *connector.ManualClock
	pre, dec  *connector.Engine
	producers []*Producer // by world rank
	consumers []*Consumer
	preAgents []nixl.Agent
	decAgents []nixl.Agent
	preLayout []descriptors.Layout
	decLayout []descriptors.Layout
}

type stageRigConfig struct {
	pp, preTP, decTP int
	decBlock         int // decode's block size (0: prefill's, 16)
	fabric           []loopback.FabricOption
	preRank, decRank func(*Config)
	// agent holds options for the agents it names ("prefill-3").
	agent map[string][]loopback.AgentOption
}

func newStageRig(t testing.TB, sc stageRigConfig) *stageRig {
	t.Helper()
	f, err := loopback.NewFabric(sc.fabric...)
	require.NoError(t, err)
	r := &stageRig{t: t, fabric: f, clock: connector.NewManualClock(rigStart)}
	t.Cleanup(r.close)
	pg, dg := stageGeometry(sc.preTP, sc.pp), stageGeometry(sc.decTP, 0)
	if sc.decBlock > 0 {
		dg.BlockSize = sc.decBlock
	}
	r.pre, err = NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg})
	require.NoError(t, err)
	r.dec, err = NewEngine(connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: dg})
	require.NoError(t, err)
	alloc := func(n uint64) *nixl.Buffer {
		buf, err := nixl.AllocBuffer(int(n))
		require.NoError(t, err)
		return buf
	}
	for s := range sc.pp {
		for tp := range sc.preTP {
			buf := alloc(pg.StageBytes(s))
			l, err := pg.StageLayout(nixl.DRAM, s, tp, buf.RegDesc().Desc)
			require.NoError(t, err)
			layoutBufs[l.Regions[0].Base] = buf
			name := fmt.Sprintf("prefill-%d", l.WorldRank())
			a, err := f.NewAgent(name, sc.agent[name]...)
			require.NoError(t, err)
			cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, Clock: r.clock, IdleInterval: 5 * time.Millisecond}}
			if sc.preRank != nil {
				sc.preRank(&cfg)
			}
			p, err := NewProducer(r.pre, cfg)
			require.NoError(t, err)
			r.preAgents, r.preLayout, r.producers = append(r.preAgents, a), append(r.preLayout, l), append(r.producers, p)
		}
	}
	for tp := range sc.decTP {
		buf := alloc(dg.RankBytes())
		l, err := dg.Layout(nixl.DRAM, tp, buf.RegDesc().Desc)
		require.NoError(t, err)
		layoutBufs[l.Regions[0].Base] = buf
		a, err := f.NewAgent(fmt.Sprintf("decode-%d", tp))
		require.NoError(t, err)
		cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, Clock: r.clock, IdleInterval: 5 * time.Millisecond}}
		if sc.decRank != nil {
			sc.decRank(&cfg)
		}
		c, err := NewConsumer(r.dec, cfg)
		require.NoError(t, err)
		r.decAgents, r.decLayout, r.consumers = append(r.decAgents, a), append(r.decLayout, l), append(r.consumers, c)
	}
	return r
}

func (r *stageRig) close() {
	for _, p := range r.producers {
		require.NoError(r.t, p.Close())
	}
	for _, c := range r.consumers {
		require.NoError(r.t, c.Close())
	}
	require.NoError(r.t, r.pre.Close())
	require.NoError(r.t, r.dec.Close())
	for _, l := range append(append([]descriptors.Layout{}, r.preLayout...), r.decLayout...) {
		freeLayout(l)
	}
	require.NoError(r.t, r.fabric.Close())
}

// fillStage writes request seed's KV content into a stage rank's blocks,
// each region under its model region's index (the stage's first layer
// on), so that check on a whole decode layout expects exactly these bytes.
func fillStage(t testing.TB, l descriptors.Layout, blocks []int, seed, tokens int) {
	shift := l.FirstLayer * l.NumRegions() / l.NumLayers
	visit(t, l, blocks, 0, tokens, func(p *byte, region, head, token, b int) {
		*p = kvByte(seed, region+shift, head, token, b)
	})
}

// fillStageLayers is fillStage of blocks starting at token first, in the
// stage's layers [lo, hi) only.
func fillStageLayers(t testing.TB, l descriptors.Layout, blocks []int, first, tokens, lo, hi, seed int) {
	per := l.NumRegions() / l.NumLayers
	shift := l.FirstLayer * per
	visit(t, l, blocks, first, tokens, func(p *byte, region, head, token, b int) {
		if region/per >= lo && region/per < hi {
			*p = kvByte(seed, region+shift, head, token, b)
		}
	})
}

// writers returns how many prefill ranks write into decode rank d: one per
// Sources rank of every stage.
func (r *stageRig) writers(d int) int {
	n := 0
	for w := range r.preLayout {
		l := &r.preLayout[w]
		if l.TPRank != 0 {
			continue
		}
		srcs, err := descriptors.Sources(l, &r.decLayout[d])
		require.NoError(r.t, err)
		n += len(srcs)
	}
	return n
}

// stageTestLayout allocates world rank world's KV cache of pipeline
// geometry g (g.TPSize ranks per stage): its stage's layers only.
func stageTestLayout(t testing.TB, g descriptors.Geometry, world int) descriptors.Layout {
	t.Helper()
	s, tp := world/g.TPSize, world%g.TPSize
	buf, err := nixl.AllocBuffer(int(g.StageBytes(s)))
	require.NoError(t, err)
	l, err := g.StageLayout(nixl.DRAM, s, tp, buf.RegDesc().Desc)
	require.NoError(t, err)
	layoutBufs[l.Regions[0].Base] = buf
	return l
}
