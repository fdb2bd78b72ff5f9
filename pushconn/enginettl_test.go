package pushconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// secondEngine starts another engine of the rig's geometry on the rig's
// fabric with one rank, a Producer or a Consumer, on the rig's clock.
func secondEngine(t *testing.T, r *rig, id string, producer bool, ttl time.Duration) (*connector.Engine, *Producer, *Consumer, descriptors.Layout) {
	t.Helper()
	e, err := NewEngine(connector.EngineConfig{EngineID: id, Model: "m", Geometry: testGeometry(1, 16, numBlocks)})
	require.NoError(t, err)
	a, err := r.fabric.NewAgent(id + "-0")
	require.NoError(t, err)
	l := testLayout(t, 1, 0, 16, numBlocks)
	cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, Clock: r.clock, IdleInterval: 5 * time.Millisecond, EngineTTL: ttl}}
	var p *Producer
	var c *Consumer
	if producer {
		p, err = NewProducer(e, cfg)
	} else {
		c, err = NewConsumer(e, cfg)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		if p != nil {
			require.NoError(t, p.Close())
		}
		if c != nil {
			require.NoError(t, c.Close())
		}
		require.NoError(t, e.Close())
		freeLayout(l)
	})
	return e, p, c, l
}

// A peer engine a rank has had no request with for EngineTTL is forgotten
// when a request names an engine the rank does not know: its agent's
// metadata is unloaded and its handshake dropped, and its next request
// handshakes again and moves every byte right (vLLM's engine_ttl). Both
// sides: a prefill rank forgets a decode engine, a decode rank a prefill
// engine.
func TestEngineTTLForgetsIdlePeers(t *testing.T) {
	const ttl = time.Minute
	desc := func(base uint64) nixl.XferList {
		return nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{{Addr: base, Len: 1}}}
	}

	t.Run("prefill-forgets-decode", func(t *testing.T) {
		r := newRig(t, rigConfig{preRank: func(c *Config) { c.EngineTTL = ttl }})
		pushOne(t, r, true, "req-1", "req-1", blocksFrom(3, 2), blocksFrom(10, 2), 32)
		decMem := desc(r.decLayout[0].Regions[0].Base)
		require.NoError(t, r.preAgents[0].CheckRemoteMD("decode-0", decMem), "loaded by prefill's handshake back")

		r.clock.Advance(2 * time.Minute)
		_, _, cb, lb := secondEngine(t, r, "decode-b", false, 0)
		fill(t, r.preLayout[0], blocksFrom(20, 2), 8, 32)
		require.NoError(t, cb.Register("req-2", Coordinates(r.pre), blocksFrom(30, 2)))
		_, err := r.producers[0].RequestFinished("req-2", blocksFrom(20, 2))
		require.NoError(t, err)
		got := await(t, cb, 1)
		require.NoError(t, got[0].Err)
		require.Positive(t, check(t, lb, blocksFrom(30, 2), 0, 8, 32))
		freedOnce(t, r.producers[0], "req-2")
		require.Equal(t, uint64(1), extra(t, r.producers[0].Stats(), "forgotten_engines"))
		require.Error(t, r.preAgents[0].CheckRemoteMD("decode-0", decMem), "the idle decode engine's metadata is unloaded")

		// The forgotten engine registers again: a new handshake, every byte.
		pushOne(t, r, true, "req-3", "req-3", blocksFrom(40, 2), blocksFrom(50, 2), 32)
		require.NoError(t, r.preAgents[0].CheckRemoteMD("decode-0", decMem))
	})

	t.Run("decode-forgets-prefill", func(t *testing.T) {
		r := newRig(t, rigConfig{decRank: func(c *Config) { c.EngineTTL = ttl }})
		pushOne(t, r, true, "req-1", "req-1", blocksFrom(3, 2), blocksFrom(10, 2), 32)
		preMem := desc(r.preLayout[0].Regions[0].Base)
		require.NoError(t, r.decAgents[0].CheckRemoteMD("prefill-0", preMem), "loaded by decode's handshake")

		r.clock.Advance(2 * time.Minute)
		pe, pb, _, lb := secondEngine(t, r, "prefill-b", true, 0)
		fill(t, lb, blocksFrom(20, 2), 8, 32)
		zero(t, r.decLayout[0], blocksFrom(30, 2))
		require.NoError(t, r.consumers[0].Register("req-2", Coordinates(pe), blocksFrom(30, 2)))
		_, err := pb.RequestFinished("req-2", blocksFrom(20, 2))
		require.NoError(t, err)
		got := await(t, r.consumers[0], 1)
		require.NoError(t, got[0].Err)
		require.Positive(t, check(t, r.decLayout[0], blocksFrom(30, 2), 0, 8, 32))
		freedOnce(t, pb, "req-2")
		require.Equal(t, uint64(1), extra(t, r.consumers[0].Stats(), "forgotten_engines"))
		require.Error(t, r.decAgents[0].CheckRemoteMD("prefill-0", preMem), "the idle prefill engine's metadata is unloaded")

		pushOne(t, r, true, "req-3", "req-3", blocksFrom(40, 2), blocksFrom(50, 2), 32)
		require.NoError(t, r.decAgents[0].CheckRemoteMD("prefill-0", preMem))
	})
}
