package pushconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// prefillInstance is a prefill engine with one rank, started in place of
// the rig's after it went away: same engine id and side-channel port.
type prefillInstance struct {
	engine   *connector.Engine
	agent    nixl.Agent
	layout   descriptors.Layout
	producer *Producer
}

// crashPrefill ends the rig's prefill engine (TP 1) the way kill -9 does:
// its agent disappears first, so nothing it would say on the way out
// reaches decode, then its rank and side channel. It returns the port the
// engine listened on.
func crashPrefill(t *testing.T, r *rig) int {
	t.Helper()
	port := r.pre.Port()
	require.NoError(t, r.preAgents[0].Close())
	require.NoError(t, r.producers[0].Close())
	require.NoError(t, r.pre.Close())
	return port
}

// startPrefill starts prefill engine "prefill" (TP 1) on the rig's fabric,
// listening on port, with one Producer whose agent is named agent.
func startPrefill(t *testing.T, r *rig, agent string, port int) *prefillInstance {
	t.Helper()
	p := &prefillInstance{}
	var err error
	p.agent, err = r.fabric.NewAgent(agent)
	require.NoError(t, err)
	t.Cleanup(func() { p.agent.Close() })
	p.engine, err = NewEngine(connector.EngineConfig{EngineID: "prefill", ListenAddr: fmt.Sprintf("127.0.0.1:%d", port), Model: "m", Geometry: testGeometry(1, 16, numBlocks)})
	require.NoError(t, err)
	t.Cleanup(func() { p.engine.Close() })
	p.layout = testLayout(t, 1, 0, 16, numBlocks)
	t.Cleanup(func() { freeLayout(p.layout) })
	p.producer, err = NewProducer(p.engine, Config{RankConfig: connector.RankConfig{Agent: p.agent, Layout: p.layout, Clock: r.clock, IdleInterval: 5 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { p.producer.Close() })
	return p
}

// pushThrough pushes request id from prefill p into decode blocks dst of
// the rig's decode rank and checks every byte.
func pushThrough(t *testing.T, r *rig, p *prefillInstance, id string, seed int, dst []int) {
	t.Helper()
	c := r.consumers[0]
	src := blocksFrom(10, len(dst))
	fill(t, p.layout, src, seed, 16*len(dst))
	zero(t, r.decLayout[0], dst)
	require.NoError(t, c.Register(id, Coordinates(p.engine), dst))
	var early []connector.Result
	eventually(t, "registration admitted by the new prefill, or a result", func() bool {
		early = append(early, c.Drain()...)
		return len(early) > 0 || extra(t, p.producer.Stats(), "registrations_received") > 0
	})
	if len(early) > 0 {
		t.Fatalf("request %q ended before prefill got its registration: %v", id, early[0].Err)
	}
	_, err := p.producer.RequestFinished(id, src)
	require.NoError(t, err)
	res := await(t, c, 1)
	require.Equal(t, id, res[0].RequestID)
	require.NoError(t, res[0].Err, "the first request after the prefill restarted")
	require.Equal(t, 16*len(dst)*modelHeads*headBytes*2*numLayers, check(t, r.decLayout[0], dst, 0, seed, 16*len(dst)))
	freedOnce(t, p.producer, id)
}

// A prefill engine that crashed and restarted at the same address (same
// engine id and port) is handshaken with again: the first request after
// the restart goes to the new instance and lands, whether the new rank's
// agent took the old name or a new one; the old agent's metadata is
// unloaded.
func TestDecodeHandshakesAgainWithRestartedPrefill(t *testing.T) {
	for _, agent := range []string{"prefill-0", "prefill-0-reborn"} {
		t.Run(agent, func(t *testing.T) {
			r := newRig(t, rigConfig{})
			c := r.consumers[0]
			pushOne(t, r, true, "warm", "warm", blocksFrom(0, 2), blocksFrom(2, 2), 32)
			port := crashPrefill(t, r)
			p := startPrefill(t, r, agent, port)

			pushThrough(t, r, p, "after-1", 3, blocksFrom(20, 2))
			pushThrough(t, r, p, "after-2", 4, blocksFrom(30, 3))

			s := c.Stats()
			require.Equal(t, uint64(2), extra(t, s, "handshakes"), "one handshake per incarnation")
			require.Equal(t, uint64(1), s.FailedNotifications, "the one send to the dead agent")
			require.Equal(t, uint64(3), extra(t, s, "registrations_sent"))
			if agent != "prefill-0" {
				require.ErrorIs(t, r.decAgents[0].CheckRemoteMD("prefill-0", nixl.XferList{}), nixl.ErrNotFound, "the dead agent's metadata is unloaded")
			}
			require.NoError(t, r.decAgents[0].CheckRemoteMD(agent, nixl.XferList{}))
		})
	}
}

// A request whose registration reached the prefill instance that then
// crashed is never written: once decode sees the engine restarted (the
// first request after the restart finds the old agent disconnected and
// the engine publishing a new incarnation), that request fails with
// errPrefillGone at once, its blocks back (the old agent's metadata is
// unloaded first), without waiting for the registration timeout: the
// clock never moves.
func TestRequestOfCrashedPrefillFailsOnceTheRestartIsSeen(t *testing.T) {
	r := newRig(t, rigConfig{})
	c := r.consumers[0]
	require.NoError(t, c.Register("orphan", Coordinates(r.pre), []int{4, 5}))
	admitted(t, r.producers[0], 1)
	port := crashPrefill(t, r)
	p := startPrefill(t, r, "prefill-0", port)

	dst := blocksFrom(20, 2)
	src := blocksFrom(10, 2)
	fill(t, p.layout, src, 6, 32)
	zero(t, r.decLayout[0], dst)
	require.NoError(t, c.Register("after", Coordinates(p.engine), dst))
	admitted(t, p.producer, 1)
	_, err := p.producer.RequestFinished("after", src)
	require.NoError(t, err)
	got := map[string]error{}
	for _, res := range await(t, c, 2) {
		got[res.RequestID] = res.Err
	}
	require.NoError(t, got["after"])
	check(t, r.decLayout[0], dst, 0, 6, 32)
	require.ErrorIs(t, got["orphan"], errPrefillGone)
	require.ErrorContains(t, got["orphan"], "incarnation")
	require.Zero(t, c.Pending())
	s := c.Stats()
	require.Equal(t, uint64(1), extra(t, s, "prefill_gone"))
	require.Zero(t, extra(t, s, "registration_timeouts"))
	require.Zero(t, extra(t, s, "cancel_timeouts"))
}
