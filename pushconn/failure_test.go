package pushconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// registrationFrom returns the PUSH_REG bytes decode rank 0 sends for id.
func registrationFrom(t *testing.T, r *rig, id string, dst []int) []byte {
	t.Helper()
	msg, err := pushwire.EncodeRegistration(&pushwire.Registration{
		RequestID: id, DecodeEngineID: r.dec.ID(), DecodeHost: r.dec.Host(), DecodePort: r.dec.Port(),
		DecodeTPSize: r.dec.Geometry().TPSize, LocalBlockIDs: [][]int{dst}, RemoteEngineID: r.pre.ID(),
		RemoteHost: r.pre.Host(), RemotePort: r.pre.Port(), RemoteTPSize: r.pre.Geometry().TPSize, RemotePPSize: 1,
	})
	require.NoError(t, err)
	return msg
}

func TestDuplicateRegistrationWritesOnce(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	dst := blocksFrom(4, 2)
	require.NoError(t, c.Register("dup", Coordinates(r.pre), dst))
	eventually(t, "first registration", func() bool { return extra(t, p.Stats(), "registrations_received") == 1 })
	// The same registration again, from the same decode agent.
	require.NoError(t, r.decAgents[0].GenNotif(r.preAgents[0].Name(), registrationFrom(t, r, "dup", dst), nil))
	eventually(t, "duplicate counted", func() bool { return extra(t, p.Stats(), "duplicate_registrations") == 1 })
	_, err := p.RequestFinished("dup", blocksFrom(0, 2))
	require.NoError(t, err)
	res := await(t, c, 1)
	require.NoError(t, res[0].Err)
	freedOnce(t, p, "dup")
	// And once more after the WRITE: still no second one.
	require.NoError(t, r.decAgents[0].GenNotif(r.preAgents[0].Name(), registrationFrom(t, r, "dup", dst), nil))
	eventually(t, "late duplicate counted", func() bool { return extra(t, p.Stats(), "duplicate_registrations") == 2 })
	require.Equal(t, uint64(1), r.fabric.Counters().Posted, "one WRITE")
	require.Equal(t, uint64(1), p.Stats().Transfers)
	require.Empty(t, c.Drain(), "decode's request ended once")
}

func TestRegistrationExpiresWhenRequestNeverFinishes(t *testing.T) {
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.RegistrationTimeout = 10 * time.Second }})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("never", Coordinates(r.pre), []int{1}))
	admitted(t, p, 1)
	r.clock.Advance(10 * time.Second)
	p.DrainFreed() // an engine step wakes the writer
	res := await(t, c, 1)
	require.True(t, isPushFail(res[0].Err, "expired"), "got %v", res[0].Err)
	require.Contains(t, res[0].Err.Error(), `prefill engine "prefill" rank 0`)
	ps := p.Stats()
	require.Equal(t, uint64(1), extra(t, ps, "unmatched_expired"))
	require.Equal(t, uint64(1), extra(t, ps, "push_fail_sent"))
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_fail_received"))
	// Finishing now writes nothing: the registration is gone.
	_, err := p.RequestFinished("never", []int{0})
	require.NoError(t, err)
	r.clock.Advance(connector.DefaultLease)
	freedOnce(t, p, "never")
	require.Zero(t, r.fabric.Counters().Posted)
}

func TestDecodeTimesOutOnItsOwn(t *testing.T) {
	// Prefill keeps registrations longer than decode waits: decode's own
	// deadline ends the request, with an error that says what is missing.
	r := newRig(t, rigConfig{decRank: func(c *Config) { c.RegistrationTimeout = 3 * time.Second }})
	c := r.consumers[0]
	require.NoError(t, c.Register("slow", Coordinates(r.pre), []int{1}))
	admitted(t, r.producers[0], 1)
	r.clock.Advance(3 * time.Second)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	require.EqualError(t, res[0].Err, `pushconn: registration timed out: request "slow" from prefill engine "prefill": no push within 3s (0 of 1 prefill ranks reported)`)
	require.Equal(t, uint64(1), extra(t, c.Stats(), "registration_timeouts"))
}

func TestFinishedBlocksLeaseExpiresOnce(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	_, err := p.RequestFinished("orphan", blocksFrom(0, 3))
	require.NoError(t, err)
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, p.DrainFreed(), "held until the lease ends")
	r.clock.Advance(connector.DefaultLease)
	freedOnce(t, p, "orphan")
	require.Equal(t, uint64(1), p.Stats().ExpiredRequests)
	// A registration arriving now pairs with nothing.
	require.NoError(t, r.consumers[0].Register("orphan", Coordinates(r.pre), []int{1, 2, 3}))
	admitted(t, p, 1)
	require.Zero(t, r.fabric.Counters().Posted)
	require.Equal(t, uint64(1), p.Stats().ExpiredRequests)
}

func TestWritePostFailureFailsDecodeAtOnce(t *testing.T) {
	r := newRig(t, rigConfig{})
	_, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.FailPost, From: "prefill-0"})
	require.NoError(t, err)
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("pf", Coordinates(r.pre), blocksFrom(0, 2)))
	admitted(t, p, 1)
	_, err = p.RequestFinished("pf", blocksFrom(0, 2))
	require.NoError(t, err)
	res := await(t, c, 1) // the registration timeout is 480 s: this is the PUSH_FAIL
	require.True(t, isPushFail(res[0].Err, "post"), "got %v", res[0].Err)
	require.Contains(t, res[0].Err.Error(), "post WRITE")
	freedOnce(t, p, "pf")
	require.Equal(t, uint64(1), p.Stats().FailedTransfers)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "push_fail_sent"))
}

func TestWriteInFlightFailureFailsDecodeAtOnce(t *testing.T) {
	r := newRig(t, rigConfig{fabric: []loopback.FabricOption{loopback.WithModel(loopback.FixedLatency(2 * time.Millisecond))}})
	_, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "prefill-0"})
	require.NoError(t, err)
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("inflight", Coordinates(r.pre), blocksFrom(0, 2)))
	admitted(t, p, 1)
	_, err = p.RequestFinished("inflight", blocksFrom(0, 2))
	require.NoError(t, err)
	res := await(t, c, 1)
	require.True(t, isPushFail(res[0].Err, "transfer"), "got %v", res[0].Err)
	freedOnce(t, p, "inflight")
	require.Equal(t, uint64(1), r.fabric.Counters().InFlightFailed)
	require.Equal(t, uint64(1), p.Stats().FailedTransfers)
}

func TestWriteTimeoutCancelsAndFails(t *testing.T) {
	// Prefill's transfers take an hour on the fabric; its write timeout,
	// on the test's clock, is one second.
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.WriteTimeout = time.Second }})
	require.NoError(t, r.producers[0].Close())
	require.NoError(t, r.preAgents[0].Close())
	slow, err := r.fabric.NewAgent("prefill-slow", loopback.AgentModel(loopback.FixedLatency(time.Hour)))
	require.NoError(t, err)
	p, err := NewProducer(r.pre, Config{RankConfig: connector.RankConfig{Agent: slow, Layout: r.preLayout[0], Clock: r.clock}, WriteTimeout: time.Second})
	require.NoError(t, err)
	r.producers[0] = p
	c := r.consumers[0]
	require.NoError(t, c.Register("stuck", Coordinates(r.pre), []int{0}))
	admitted(t, p, 1)
	_, err = p.RequestFinished("stuck", []int{0})
	require.NoError(t, err)
	eventually(t, "WRITE posted", func() bool { return r.fabric.Counters().Posted == 1 })
	require.Empty(t, p.DrainFreed(), "held while the WRITE is in flight")
	r.clock.Advance(time.Second)
	freedOnce(t, p, "stuck")
	require.Equal(t, uint64(1), p.Stats().FailedTransfers)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "push_fail_sent"))
	require.Equal(t, uint64(1), r.fabric.Counters().Cancelled)
}

func TestDecodeGoneBeforeRegisteringLeaseReleases(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	require.NoError(t, r.consumers[0].Close()) // the decode engine is gone
	_, err := p.RequestFinished("gone", blocksFrom(0, 2))
	require.NoError(t, err)
	r.clock.Advance(connector.DefaultLease)
	freedOnce(t, p, "gone")
	require.Equal(t, uint64(1), p.Stats().ExpiredRequests)
}

func TestDecodeGoneAfterRegisteringReleasesAtOnce(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("gone2", Coordinates(r.pre), blocksFrom(0, 2)))
	admitted(t, p, 1)
	require.NoError(t, r.fabric.Disconnect("decode-0"))
	_, err := p.RequestFinished("gone2", blocksFrom(0, 2))
	require.NoError(t, err)
	freedOnce(t, p, "gone2")
	ps := p.Stats()
	require.Equal(t, uint64(1), ps.FailedTransfers)
	require.Equal(t, uint64(1), extra(t, ps, "push_fail_undeliverable"), "decode cannot hear it")
	require.Zero(t, ps.ExpiredRequests)
}

func TestMalformedRegistrationCountedAndDropped(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	// Make decode load prefill's metadata, then send garbage from its agent.
	require.NoError(t, c.Register("ok", Coordinates(r.pre), []int{1}))
	admitted(t, p, 1)
	for _, msg := range []string{"PUSH_REG:", "PUSH_REG:\x93\x01\x02\x03", "PUSH_REG:\xdd\xff\xff\xff\xff", "x:1", "PUSH_FAIL:\x80"} {
		require.NoError(t, r.decAgents[0].GenNotif("prefill-0", []byte(msg), nil))
	}
	eventually(t, "bad notifications counted", func() bool {
		s := p.Stats()
		return s.MalformedNotifications == 3 && s.UnknownNotifications == 2
	})
	require.Equal(t, uint64(1), extra(t, p.Stats(), "registrations_received"), "no state change")
	_, err := p.RequestFinished("ok", []int{0})
	require.NoError(t, err)
	require.NoError(t, await(t, c, 1)[0].Err, "the good request still works")
}

func TestMisdirectedRegistrationDropped(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	require.NoError(t, r.consumers[0].Register("ok", Coordinates(r.pre), []int{1}))
	admitted(t, p, 1)
	reg, err := pushwire.DecodeRegistration(registrationFrom(t, r, "other", []int{1}))
	require.NoError(t, err)
	reg.RemoteEngineID = "someone-else"
	msg, err := pushwire.EncodeRegistration(reg)
	require.NoError(t, err)
	require.NoError(t, r.decAgents[0].GenNotif("prefill-0", msg, nil))
	eventually(t, "misdirected counted", func() bool { return extra(t, p.Stats(), "misdirected_registrations") == 1 })
}

func TestPrefixHitNotificationOnly(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("hit", Coordinates(r.pre), []int{}))
	_, err := p.RequestFinished("hit", blocksFrom(0, 2))
	require.NoError(t, err)
	require.NoError(t, await(t, c, 1)[0].Err)
	freedOnce(t, p, "hit")
	require.Zero(t, r.fabric.Counters().Posted, "nothing to write")
}

func TestPartialPrefixHit(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	src := blocksFrom(0, 4)
	fill(t, r.preLayout[0], src, 9, 60)
	dst := []int{21, 22} // decode already holds the first two blocks
	zero(t, r.decLayout[0], dst)
	require.NoError(t, c.Register("partial", Coordinates(r.pre), dst))
	_, err := p.RequestFinished("partial", src)
	require.NoError(t, err)
	require.NoError(t, await(t, c, 1)[0].Err)
	require.Equal(t, 2*16*modelHeads*headBytes*4-4*modelHeads*headBytes*4, check(t, r.decLayout[0], dst, 2, 9, 60))
	require.Equal(t, uint64(2*4*1024), p.Stats().Bytes, "only the two uncached blocks moved")
}

func TestModeMismatchRefusedAtHandshake(t *testing.T) {
	// A pull-mode prefill engine: decode (push) must refuse it by name.
	pull, err := handshake.Serve("127.0.0.1:0", handshake.Engine{
		EngineID: "pull-prefill", Compat: handshake.Compat{Version: handshake.Version, Model: "m", DType: "bfloat16", Layout: "HND", Mode: handshake.ModePull},
		TPSize: 1, PPSize: 1, BlockSize: 16,
	}, handshake.ServerOptions{})
	require.NoError(t, err)
	defer pull.Close()
	r := newRig(t, rigConfig{noProducers: true})
	c := r.consumers[0]
	pf := Prefill{EngineID: "pull-prefill", Host: "127.0.0.1", Port: pull.Addr().Port, TPSize: 1, PPSize: 1}
	require.NoError(t, c.Register("mm", pf, []int{1}))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrIncompatible)
	require.Contains(t, res[0].Err.Error(), `transfer mode mismatch: local "push", remote "pull"`)
	require.Equal(t, uint64(1), c.Stats().FailedHandshakes)

	// And a pull-mode client is refused by a push engine, counted there.
	client, err := handshake.NewClient("pull-decode", handshake.Compat{Version: handshake.Version, Model: "m", DType: "bfloat16", Layout: "HND", Mode: handshake.ModePull}, time.Second, 0)
	require.NoError(t, err)
	_, err = client.Get(t.Context(), "decode", fmt.Sprintf("%s:%d", r.dec.Host(), r.dec.Port()))
	require.ErrorIs(t, err, connector.ErrIncompatible)
	require.Contains(t, err.Error(), `transfer mode mismatch: local "pull", remote "push"`)
	require.Equal(t, uint64(1), r.dec.Stats().FailedHandshakes)
}

func TestHandshakeToDeadAddressFailsWithinDeadline(t *testing.T) {
	r := newRig(t, rigConfig{noProducers: true})
	c := r.consumers[0]
	pf := Prefill{EngineID: "nobody", Host: "127.0.0.1", Port: 1, TPSize: 1, PPSize: 1}
	require.NoError(t, c.Register("dead", pf, []int{1}))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrHandshake)
	require.Contains(t, res[0].Err.Error(), `engine "nobody" at 127.0.0.1:1`)
}

func TestRegisterRejectsBadInput(t *testing.T) {
	r := newRig(t, rigConfig{noProducers: true})
	c := r.consumers[0]
	pf := Coordinates(r.pre)
	for name, tc := range map[string]struct {
		id     string
		pf     Prefill
		blocks []int
		want   string
	}{
		"empty id": {"", pf, []int{1}, "request id must be 1..1024 bytes, got 0"},
		"block id": {"a", pf, []int{64}, "block 0 is 64, outside 0..63"},
		"pp":       {"a", Prefill{EngineID: "p", Host: "h", Port: 1, TPSize: 1, PPSize: 0}, []int{1}, "Prefill.PPSize is 0, want >= 1"},
		"port":     {"a", Prefill{EngineID: "p", Host: "h", Port: 0, TPSize: 1, PPSize: 1}, []int{1}, "Prefill.Port is 0"},
	} {
		err := c.Register(tc.id, tc.pf, tc.blocks)
		require.ErrorIs(t, err, connector.ErrInvalid, name)
		require.ErrorContains(t, err, tc.want, name)
	}
	require.Zero(t, c.Pending())
	require.NoError(t, c.Register("once", pf, []int{1}))
	require.ErrorContains(t, c.Register("once", pf, []int{1}), `request "once" is already registered`)
}

func TestRequestFinishedRejectsBadInput(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	_, err := p.RequestFinished("a", nil)
	require.ErrorContains(t, err, `request "a" has no blocks`)
	_, err = p.RequestFinished("a", []int{-1})
	require.ErrorContains(t, err, "block 0 is -1, outside 0..63")
	_, err = p.RequestFinished("a", []int{1}, withTokens(17))
	require.ErrorContains(t, err, "has 17 tokens, its 1 blocks hold at most 16")
	_, err = p.RequestFinished("a", []int{1})
	require.NoError(t, err)
	_, err = p.RequestFinished("a", []int{2})
	require.ErrorIs(t, err, connector.ErrInvalid)
	require.ErrorContains(t, err, `request "a" is already finished and held`)
}

func TestCloseEndsEverythingOnce(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("waiting", Coordinates(r.pre), []int{1}))
	_, err := p.RequestFinished("held", []int{0})
	require.NoError(t, err)
	admitted(t, p, 1)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "idempotent")
	freed := p.DrainFreed()
	require.Equal(t, []string{"held"}, freed)
	_, err = p.RequestFinished("late", []int{0})
	require.ErrorIs(t, err, connector.ErrClosed)
	// Prefill told decode its registration will not be served.
	res := await(t, c, 1)
	require.True(t, isPushFail(res[0].Err, "closed"), "got %v", res[0].Err)
	require.NoError(t, c.Register("after", Coordinates(r.pre), []int{1}))
	require.NoError(t, c.Close())
	res = c.Drain()
	require.Len(t, res, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrClosed)
	require.ErrorIs(t, c.Register("x", Coordinates(r.pre), []int{1}), connector.ErrClosed)
}

func TestPullPrefillRefusedByPushDecode(t *testing.T) {
	// A real pull prefill engine with a rank: the push decode engine refuses
	// it at the handshake, naming both modes, and sends nothing.
	f, err := loopback.NewFabric()
	require.NoError(t, err)
	defer f.Close()
	pe, err := pullconn.NewEngine(connector.EngineConfig{EngineID: "pull-prefill", Model: "m", Geometry: testGeometry(1, 16, numBlocks)})
	require.NoError(t, err)
	defer pe.Close()
	a, err := f.NewAgent("pull-prefill-0")
	require.NoError(t, err)
	l := testLayout(t, 1, 0, 16, numBlocks)
	defer freeLayout(l)
	pp, err := pullconn.NewProducer(pe, pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}})
	require.NoError(t, err)
	defer pp.Close()

	r := newRig(t, rigConfig{noProducers: true})
	c := r.consumers[0]
	require.NoError(t, c.Register("mm", Prefill{EngineID: "pull-prefill", Host: pe.Host(), Port: pe.Port(), TPSize: 1, PPSize: 1}, []int{1}))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrIncompatible)
	require.Contains(t, res[0].Err.Error(), `transfer mode mismatch: local "push", remote "pull"`)
	require.Zero(t, extra(t, c.Stats(), "registrations_sent"))
	require.Equal(t, uint64(1), pe.Stats().FailedHandshakes, "the pull engine refused us too")
}

func TestPushPrefillRefusedByPullDecode(t *testing.T) {
	r := newRig(t, rigConfig{})
	de, err := pullconn.NewEngine(connector.EngineConfig{EngineID: "pull-decode", Model: "m", Geometry: testGeometry(1, 16, numBlocks)})
	require.NoError(t, err)
	defer de.Close()
	a, err := r.fabric.NewAgent("pull-decode-0")
	require.NoError(t, err)
	l := testLayout(t, 1, 0, 16, numBlocks)
	defer freeLayout(l)
	pc, err := pullconn.NewConsumer(de, pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}})
	require.NoError(t, err)
	defer pc.Close()
	params := pullconn.Params{TransferParams: connector.TransferParams{DoRemotePrefill: true, RemoteBlockIDs: []int{0}, RemoteEngineID: r.pre.ID(), RemoteRequestID: "x", RemoteHost: r.pre.Host(), RemotePort: r.pre.Port(), TPSize: 1}, TransferMode: "pull"}
	require.NoError(t, pc.Load("x", params, []int{0}))
	var res []connector.Result
	eventually(t, "pull result", func() bool { res = append(res, pc.Drain()...); return len(res) == 1 })
	require.ErrorIs(t, res[0].Err, connector.ErrIncompatible)
	require.Contains(t, res[0].Err.Error(), `transfer mode mismatch: local "pull", remote "push"`)
	require.Equal(t, uint64(1), r.pre.Stats().FailedHandshakes, "the push engine refused it too")
}

func TestDecodeRestartRehandshakes(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	pushOne(t, r, true, "before", "before", blocksFrom(0, 2), blocksFrom(0, 2), 32)
	// The decode engine's rank restarts: new agent under the same name.
	require.NoError(t, r.consumers[0].Close())
	require.NoError(t, r.decAgents[0].Close())
	a, err := r.fabric.NewAgent("decode-0")
	require.NoError(t, err)
	c, err := NewConsumer(r.dec, Config{RankConfig: connector.RankConfig{Agent: a, Layout: r.decLayout[0], Clock: r.clock}})
	require.NoError(t, err)
	r.consumers[0], r.decAgents[0] = c, a
	// Prefill still holds the old instance's metadata, but the new rank's
	// registration carries its new incarnation: prefill handshakes again
	// before admitting it, and the WRITE goes to the new agent at once.
	pushOne(t, r, true, "after", "after", blocksFrom(2, 2), blocksFrom(2, 2), 32)
	s := p.Stats()
	require.Equal(t, uint64(2), s.Transfers)
	require.Zero(t, s.FailedTransfers)
	require.Equal(t, uint64(2), extra(t, s, "handshakes"))
	require.Zero(t, extra(t, s, "stale_registrations"))
}
