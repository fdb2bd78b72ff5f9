package pushconn

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// startDecodeAgent starts decode engine "decode" (TP 1) on the rig's
// fabric at port, as startDecode does, but with its rank's agent named
// agent, in the rig's protocol (vllm: vLLM's, with vLLM's packed layout).
// A real engine names its agents anew at every start (vLLM: a uuid each),
// so a restarted decode engine's agents are strangers to prefill.
func startDecodeAgent(t *testing.T, r *rig, agent string, port int, vllm bool, opts ...loopback.AgentOption) *decodeInstance {
	t.Helper()
	d := &decodeInstance{}
	var err error
	d.agent, err = r.fabric.NewAgent(agent, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { d.agent.Close() })
	g := testGeometry(1, 16, numBlocks)
	cfg := connector.EngineConfig{EngineID: "decode", ListenAddr: fmt.Sprintf("127.0.0.1:%d", port), Model: "m", Geometry: g}
	d.layout = testLayout(t, 1, 0, 16, numBlocks)
	if vllm {
		freeLayout(d.layout)
		g.KVPacked = true
		cfg.Geometry, cfg.Protocol, cfg.VLLM = g, connector.ProtocolVLLM, rigVLLM
		d.layout = packedLayout(t, 1, 0, 16, numBlocks)
	}
	t.Cleanup(func() { freeLayout(d.layout) })
	d.engine, err = NewEngine(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.engine.Close() })
	d.consumer, err = NewConsumer(d.engine, Config{RankConfig: connector.RankConfig{Agent: d.agent, Layout: d.layout, Clock: r.clock, IdleInterval: 5 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { d.consumer.Close() })
	return d
}

// Issue 35: a decode engine killed and restarted at the same address (same
// engine id and side-channel port) with new agents. Its first registration
// comes from an agent prefill's cached handshake does not name: prefill
// handshakes again, loads the new agents, unloads the dead one's metadata
// and writes the request, the first try, every byte checked. The dead
// instance's registration, whose request finishes after the restart, is
// never written and its blocks are freed exactly once. Before the fix the
// registration was refused as misdirected with a PUSH_FAIL that could not
// reach the unknown agent, and decode waited for its timeout.
func TestRestartedDecodeWithNewAgentsIsServedFirstTry(t *testing.T) {
	for _, vllm := range []bool{false, true} {
		t.Run(fmt.Sprintf("vllm=%v", vllm), func(t *testing.T) {
			r := newRig(t, rigConfig{vllm: vllm})
			p := r.producers[0]
			require.NoError(t, r.consumers[0].Register("old", Coordinates(r.pre), []int{4, 5}))
			admitted(t, p, 1)
			port := r.dec.Port()
			crashDecode(t, r)
			d := startDecodeAgent(t, r, "decode-0-reborn", port, vllm)
			zero(t, d.layout, blocksFrom(0, 16))

			for i, dst := range [][]int{blocksFrom(8, 2), blocksFrom(12, 3)} {
				id := fmt.Sprintf("new-%d", i)
				src := blocksFrom(20+4*i, len(dst))
				fill(t, r.preLayout[0], src, 7+i, 16*len(dst))
				require.NoError(t, d.consumer.Register(id, Coordinates(r.pre), dst))
				eventually(t, "registration received", func() bool { return extra(t, p.Stats(), "registrations_received") == uint64(2+i) })
				_, err := p.RequestFinished(id, src)
				require.NoError(t, err)
				res := await(t, d.consumer, 1)
				require.Equal(t, id, res[0].RequestID)
				require.NoError(t, res[0].Err, "request %d after the decode restart", i)
				require.Equal(t, 16*len(dst)*modelHeads*headBytes*2*numLayers, check(t, d.layout, dst, 0, 7+i, 16*len(dst)))
				freedOnce(t, p, id)
			}

			// The dead instance's request finishes now: nothing is written
			// (its agent is gone, and the new instance's blocks 4 and 5
			// belong to none of its requests), its blocks go back once.
			src := blocksFrom(0, 2)
			fill(t, r.preLayout[0], src, 5, 32)
			_, err := p.RequestFinished("old", src)
			require.NoError(t, err)
			freedOnce(t, p, "old")
			require.Zero(t, nonZero(t, d.layout, []int{4, 5}), "prefill wrote a dead instance's request into the restarted decode")

			s := p.Stats()
			require.Equal(t, uint64(1), extra(t, s, "decode_restarts"))
			require.Equal(t, uint64(2), extra(t, s, "handshakes"), "one per decode incarnation")
			require.Equal(t, uint64(1), extra(t, s, "stale_registrations"))
			require.Zero(t, extra(t, s, "misdirected_registrations"))
			require.Equal(t, uint64(2), s.Transfers)
			require.Zero(t, s.FailedTransfers)
			require.ErrorIs(t, r.preAgents[0].CheckRemoteMD("decode-0", nixl.XferList{}), nixl.ErrNotFound, "the dead agent's metadata is unloaded")
			require.NoError(t, r.preAgents[0].CheckRemoteMD("decode-0-reborn", nixl.XferList{}))
			require.Zero(t, d.consumer.Stats().UnknownNotifications)
			require.Zero(t, p.Held())
		})
	}
}

// vLLM's protocol carries no incarnation. A decode engine restarted with
// the same agent name: the first registration after the restart comes
// from a name prefill's handshake knows, so it is admitted under the old
// handshake; its WRITE finds the old agent gone, prefill handshakes again,
// sees other agent metadata (a restart) and, unable to tell whether the
// registration came from the dead instance or the new one, drops it
// unwritten (its prefill blocks freed once). vLLM's protocol has no
// PUSH_FAIL: decode fails that one request at its registration timeout
// (ErrRegistrationTimeout). The next request lands.
func TestVLLMRestartedDecodeSameAgentNameFailsAtMostTheFirstRequest(t *testing.T) {
	r := newRig(t, rigConfig{vllm: true})
	p := r.producers[0]
	require.NoError(t, r.consumers[0].Register("old", Coordinates(r.pre), []int{4, 5}))
	admitted(t, p, 1)
	port := r.dec.Port()
	crashDecode(t, r)
	d := startDecodeAgent(t, r, "decode-0", port, true)
	zero(t, d.layout, blocksFrom(0, 16))

	src := blocksFrom(20, 2)
	fill(t, r.preLayout[0], src, 3, 32)
	require.NoError(t, d.consumer.Register("first", Coordinates(r.pre), blocksFrom(8, 2)))
	eventually(t, "registration received", func() bool { return extra(t, p.Stats(), "registrations_received") == 2 })
	_, err := p.RequestFinished("first", src)
	require.NoError(t, err)
	freedOnce(t, p, "first")
	require.Zero(t, nonZero(t, d.layout, blocksFrom(0, 16)), "nothing written: the registration could have been the dead instance's")

	// The dead instance's own request: dropped unwritten when it finishes
	// (before the fix it was written into the new instance's blocks 4
	// and 5: the same agent name and no incarnation looked like the same
	// instance).
	fill(t, r.preLayout[0], src, 5, 32)
	_, err = p.RequestFinished("old", src)
	require.NoError(t, err)
	freedOnce(t, p, "old")
	require.Zero(t, nonZero(t, d.layout, blocksFrom(0, 16)), "prefill wrote a dead instance's request into the restarted decode")
	s := p.Stats()
	require.Equal(t, uint64(1), extra(t, s, "decode_restarts"))
	require.Equal(t, uint64(2), extra(t, s, "stale_registrations"))
	require.Zero(t, s.Transfers)

	cfg := d.consumer.cfg
	r.clock.Advance(cfg.RegistrationTimeout)
	eventually(t, "decode times out", func() bool { return extra(t, d.consumer.Stats(), "registration_timeouts") == 1 })
	r.clock.Advance(cfg.CancelTimeout) // vLLM's protocol: the blocks wait until no WRITE can land
	res := await(t, d.consumer, 1)
	require.Equal(t, "first", res[0].RequestID)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)

	dst := blocksFrom(12, 2)
	fill(t, r.preLayout[0], src, 4, 32)
	require.NoError(t, d.consumer.Register("second", Coordinates(r.pre), dst))
	eventually(t, "registration received", func() bool { return extra(t, p.Stats(), "registrations_received") == 3 })
	_, err = p.RequestFinished("second", src)
	require.NoError(t, err)
	res = await(t, d.consumer, 1)
	require.Equal(t, "second", res[0].RequestID)
	require.NoError(t, res[0].Err)
	require.Equal(t, 32*modelHeads*headBytes*2*numLayers, check(t, d.layout, dst, 0, 4, 32))
	freedOnce(t, p, "second")

	s = p.Stats()
	require.Equal(t, uint64(1), extra(t, s, "decode_restarts"))
	require.Equal(t, uint64(2), extra(t, s, "stale_registrations"))
	require.Equal(t, uint64(1), s.Transfers)
}

// A WRITE in flight into the decode agent when the engine is killed: it
// fails (the agent is gone) and its prefill blocks are freed exactly
// once; the restarted engine's (new agents) first request lands; the dead
// agent's metadata is unloaded once nothing is in flight into it.
func TestWriteInFlightToKilledDecodeEndsOnce(t *testing.T) {
	fc := &freezableClock{}
	r := newRig(t, rigConfig{fabric: []loopback.FabricOption{loopback.WithClock(fc), loopback.WithModel(loopback.FixedLatency(60 * time.Millisecond))}})
	p := r.producers[0]
	require.NoError(t, r.consumers[0].Register("busy", Coordinates(r.pre), []int{4, 5}))
	admitted(t, p, 1)
	fc.freeze()
	src := blocksFrom(0, 2)
	fill(t, r.preLayout[0], src, 2, 32)
	_, err := p.RequestFinished("busy", src)
	require.NoError(t, err)
	eventually(t, "posted", func() bool { return r.fabric.Counters().Posted == 1 })
	port := r.dec.Port()
	crashDecode(t, r)
	// The new agent's notifications go out instantly, so its registration
	// arrives while the fabric's clock holds the old WRITE in flight.
	d := startDecodeAgent(t, r, "decode-0-reborn", port, false, loopback.AgentModel(loopback.Instant()))
	zero(t, d.layout, blocksFrom(0, 16))
	dst := blocksFrom(8, 2)
	require.NoError(t, d.consumer.Register("new", Coordinates(r.pre), dst))
	eventually(t, "new instance handshaken", func() bool { return extra(t, p.Stats(), "decode_restarts") == 1 })
	fc.thaw()
	freedOnce(t, p, "busy")
	require.Zero(t, nonZero(t, d.layout, blocksFrom(0, 16)))

	src2 := blocksFrom(10, 2)
	fill(t, r.preLayout[0], src2, 6, 32)
	_, err = p.RequestFinished("new", src2)
	require.NoError(t, err)
	res := await(t, d.consumer, 1)
	require.NoError(t, res[0].Err)
	check(t, d.layout, dst, 0, 6, 32)
	freedOnce(t, p, "new")
	eventually(t, "dead agent unloaded", func() bool {
		return errors.Is(r.preAgents[0].CheckRemoteMD("decode-0", nixl.XferList{}), nixl.ErrNotFound)
	})
	s := p.Stats()
	require.Equal(t, uint64(1), s.FailedTransfers, "the WRITE into the killed agent")
	require.Equal(t, uint64(1), s.Transfers)
	require.Zero(t, p.Held())
}
