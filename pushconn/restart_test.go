package pushconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// decodeInstance is a decode engine with one rank, started in place of
// the rig's after it went away: same engine id, side-channel port and
// agent name.
type decodeInstance struct {
	engine   *connector.Engine
	agent    nixl.Agent
	layout   descriptors.Layout
	consumer *Consumer
}

// crashDecode ends the rig's decode engine (TP 1) the way a crash does:
// its agent disappears first, so nothing it would say on the way out
// (PUSH_CANCEL) reaches prefill.
func crashDecode(t *testing.T, r *rig) {
	t.Helper()
	require.NoError(t, r.decAgents[0].Close())
	require.NoError(t, r.consumers[0].Close())
	require.NoError(t, r.dec.Close())
	require.Equal(t, uint64(0), extra(t, r.producers[0].Stats(), "push_cancel_received"), "a crash says nothing")
}

// restartDecode starts a new decode instance where the rig's was.
func restartDecode(t *testing.T, r *rig, port int) *decodeInstance {
	t.Helper()
	return startDecode(t, r, "decode", 1, port)
}

// startDecode starts decode engine id (TP size tp) on the rig's fabric,
// listening on port (0: any), with a Consumer for rank 0 only; its agent
// is named id + "-0".
func startDecode(t *testing.T, r *rig, id string, tp, port int) *decodeInstance {
	t.Helper()
	d := &decodeInstance{}
	var err error
	d.agent, err = r.fabric.NewAgent(id + "-0")
	require.NoError(t, err)
	t.Cleanup(func() { d.agent.Close() })
	d.engine, err = NewEngine(connector.EngineConfig{EngineID: id, ListenAddr: fmt.Sprintf("127.0.0.1:%d", port), Model: "m", Geometry: testGeometry(tp, 16, numBlocks)})
	require.NoError(t, err)
	t.Cleanup(func() { d.engine.Close() })
	d.layout = testLayout(t, tp, 0, 16, numBlocks)
	t.Cleanup(func() { freeLayout(d.layout) })
	d.consumer, err = NewConsumer(d.engine, Config{RankConfig: connector.RankConfig{Agent: d.agent, Layout: d.layout, Clock: r.clock, IdleInterval: 5 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { d.consumer.Close() })
	return d
}

// nonZero counts the non-zero bytes of blocks on l.
func nonZero(t *testing.T, l descriptors.Layout, blocks []int) int {
	n := 0
	visit(t, l, blocks, 0, 1<<30, func(b *byte, _, _, _, _ int) {
		if *b != 0 {
			n++
		}
	})
	return n
}

// rawRegistration is a PUSH_REG for the rig's decode engine as a decode
// rank of incarnation inc (zero: without the key, as vLLM sends it).
func rawRegistration(t *testing.T, r *rig, port int, id string, dst []int, inc uint64) []byte {
	t.Helper()
	msg, err := pushwire.EncodeRegistration(&pushwire.Registration{
		RequestID: id, DecodeEngineID: "decode", DecodeHost: "127.0.0.1", DecodePort: port,
		DecodeTPSize: 1, LocalBlockIDs: [][]int{dst}, RemoteEngineID: r.pre.ID(),
		RemoteHost: r.pre.Host(), RemotePort: r.pre.Port(), RemoteTPSize: r.pre.Geometry().TPSize, RemotePPSize: 1,
		DecodeIncarnation: inc,
	})
	require.NoError(t, err)
	return msg
}

// The reviewer's case: a registration of a decode instance that then
// crashed and restarted under the same engine id, port and agent name.
// Prefill's WRITE fails (the old agent is gone), it handshakes again, sees
// another incarnation and drops the registration instead of retrying it
// into the new instance's blocks; no PUSH_FAIL reaches the new instance.
func TestOldRegistrationIsNotWrittenIntoRestartedDecode(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	require.NoError(t, r.consumers[0].Register("old", Coordinates(r.pre), []int{4, 5}))
	admitted(t, p, 1)
	port := r.dec.Port()
	crashDecode(t, r)
	d := restartDecode(t, r, port)
	require.NotEqual(t, r.consumers[0].incarnation, d.consumer.incarnation)
	zero(t, d.layout, []int{4, 5}) // owned by some request of the new instance

	src := blocksFrom(0, 2)
	fill(t, r.preLayout[0], src, 5, 32)
	_, err := p.RequestFinished("old", src)
	require.NoError(t, err)
	freedOnce(t, p, "old")
	require.Zero(t, nonZero(t, d.layout, []int{4, 5}), "prefill wrote a dead instance's request into the restarted decode's blocks")
	s := p.Stats()
	require.Equal(t, uint64(1), extra(t, s, "stale_registrations"))
	// The first and the one after the failed WRITE (counted just after it).
	eventually(t, "second handshake", func() bool { return extra(t, p.Stats(), "handshakes") == 2 })
	require.Zero(t, r.fabric.Counters().Posted)
	require.Zero(t, s.Transfers)
	require.Zero(t, extra(t, s, "push_fail_sent"), "the instance that registered is gone")
	ds := d.consumer.Stats()
	require.Zero(t, ds.UnknownNotifications)
	require.Zero(t, ds.LateNotifications)
	require.Empty(t, d.consumer.Drain())

	// The new instance is served normally.
	dst := blocksFrom(8, 2)
	require.NoError(t, d.consumer.Register("new", Coordinates(r.pre), dst))
	eventually(t, "new registration", func() bool { return extra(t, p.Stats(), "registrations_received") == 2 })
	_, err = p.RequestFinished("new", src)
	require.NoError(t, err)
	res := await(t, d.consumer, 1)
	require.NoError(t, res[0].Err)
	check(t, d.layout, dst, 0, 5, 32)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "stale_registrations"))
}

// A registration still waiting for its request when the restarted
// instance's first registration arrives: that one shows prefill the new
// incarnation (it handshakes again and admits it), and the old one, when
// its request finishes, is dropped without any attempt to WRITE.
func TestOldRegistrationDroppedOnceTheNewInstanceIsKnown(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	require.NoError(t, r.consumers[0].Register("old", Coordinates(r.pre), []int{4, 5}))
	admitted(t, p, 1)
	port := r.dec.Port()
	crashDecode(t, r)
	d := restartDecode(t, r, port)
	zero(t, d.layout, blocksFrom(0, 8))

	require.NoError(t, d.consumer.Register("new", Coordinates(r.pre), []int{6, 7}))
	eventually(t, "new instance admitted", func() bool { return extra(t, p.Stats(), "handshakes") == 2 })
	src := blocksFrom(0, 2)
	fill(t, r.preLayout[0], src, 3, 32)
	_, err := p.RequestFinished("old", src)
	require.NoError(t, err)
	freedOnce(t, p, "old")
	require.Zero(t, nonZero(t, d.layout, []int{4, 5}))
	_, err = p.RequestFinished("new", src)
	require.NoError(t, err)
	res := await(t, d.consumer, 1)
	require.NoError(t, res[0].Err)
	require.Equal(t, "new", res[0].RequestID)
	check(t, d.layout, []int{6, 7}, 0, 3, 32)
	s := p.Stats()
	require.Equal(t, uint64(1), extra(t, s, "stale_registrations"))
	require.Zero(t, s.FailedTransfers, "the WRITE for the new instance never went to the old metadata")
	require.Equal(t, uint64(1), s.Transfers)
	require.Equal(t, uint64(2), extra(t, s, "handshakes"))
	require.Equal(t, uint64(1), extra(t, s, "decode_restarts"), "the fresh handshake showed another incarnation")
	require.Zero(t, extra(t, s, "push_fail_sent"))
}

// A registration of the dead instance that arrives late, after prefill
// already knows the new one, is dropped at once (its incarnation is
// retired: no handshake), and one whose incarnation prefill never saw is
// dropped after one fresh handshake shows it is not the current one.
func TestLateRegistrationFromDeadInstanceIsDroppedOnArrival(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	old := r.consumers[0].incarnation
	require.NoError(t, r.consumers[0].Register("first", Coordinates(r.pre), []int{1}))
	admitted(t, p, 1)
	port := r.dec.Port()
	crashDecode(t, r)
	d := restartDecode(t, r, port)
	require.NoError(t, d.consumer.Register("new", Coordinates(r.pre), []int{2}))
	eventually(t, "new instance admitted", func() bool { return extra(t, p.Stats(), "handshakes") == 2 })

	// Sent by the agent now called decode-0, as a delayed message would be.
	require.NoError(t, d.agent.GenNotif("prefill-0", rawRegistration(t, r, port, "late", []int{3}, old), nil))
	eventually(t, "late registration dropped", func() bool { return extra(t, p.Stats(), "stale_registrations") == 1 })
	require.Equal(t, uint64(2), extra(t, p.Stats(), "handshakes"), "a retired incarnation needs no handshake")

	require.NoError(t, d.agent.GenNotif("prefill-0", rawRegistration(t, r, port, "stranger", []int{3}, old^0x5a5a), nil))
	eventually(t, "unknown incarnation dropped", func() bool { return extra(t, p.Stats(), "stale_registrations") == 2 })
	require.Equal(t, uint64(3), extra(t, p.Stats(), "handshakes"), "one fresh handshake decided")

	// Neither took a place in the matcher: their requests finish and are
	// freed at their lease, not written.
	for _, id := range []string{"late", "stranger"} {
		_, err := p.RequestFinished(id, []int{0})
		require.NoError(t, err)
	}
	r.clock.Advance(connector.DefaultLease)
	freedOnce(t, p, "late", "stranger")
	s := p.Stats()
	require.Zero(t, s.Transfers)
	require.Equal(t, uint64(2), s.ExpiredRequests)
	require.Zero(t, extra(t, s, "push_fail_sent"))
	require.Zero(t, d.consumer.Stats().UnknownNotifications)
	require.Equal(t, uint64(1), extra(t, s, "decode_restarts"), "the stranger's handshake showed the same instance")
}

// A registration without decode_incarnation (as vLLM sends it) is tied to
// the instance prefill's payload described when it arrived: after a
// restart it is dropped, not retried.
func TestRegistrationWithoutIncarnationIsNotRetriedAfterRestart(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	port := r.dec.Port()
	require.NoError(t, r.consumers[0].Register("warm", Coordinates(r.pre), []int{1})) // decode loads prefill's metadata
	admitted(t, p, 1)
	require.NoError(t, r.decAgents[0].GenNotif("prefill-0", rawRegistration(t, r, port, "keyless", []int{4, 5}, 0), nil))
	admitted(t, p, 2)
	crashDecode(t, r)
	d := restartDecode(t, r, port)
	zero(t, d.layout, []int{4, 5})
	src := blocksFrom(0, 2)
	fill(t, r.preLayout[0], src, 2, 32)
	_, err := p.RequestFinished("keyless", src)
	require.NoError(t, err)
	freedOnce(t, p, "keyless")
	require.Zero(t, nonZero(t, d.layout, []int{4, 5}))
	require.Equal(t, uint64(1), extra(t, p.Stats(), "stale_registrations"))
	require.Zero(t, r.fabric.Counters().Posted)
}

// The retry the incarnation keeps: prefill lost the decode agent's
// metadata although decode never restarted, so the fresh handshake shows
// the same incarnation and the WRITE is retried and lands.
func TestSameInstanceIsRetriedAfterFreshHandshake(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	dst := blocksFrom(4, 2)
	zero(t, r.decLayout[0], dst)
	require.NoError(t, c.Register("same", Coordinates(r.pre), dst))
	admitted(t, p, 1)
	require.NoError(t, r.preAgents[0].InvalidateRemoteMD("decode-0"))
	src := blocksFrom(0, 2)
	fill(t, r.preLayout[0], src, 4, 32)
	_, err := p.RequestFinished("same", src)
	require.NoError(t, err)
	res := await(t, c, 1)
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], dst, 0, 4, 32)
	freedOnce(t, p, "same")
	eventually(t, "second handshake", func() bool { return extra(t, p.Stats(), "handshakes") == 2 })
	s := p.Stats()
	require.Zero(t, extra(t, s, "stale_registrations"))
	require.Zero(t, extra(t, s, "decode_restarts"), "the same instance answered")
	require.Equal(t, uint64(1), s.Transfers)
}
