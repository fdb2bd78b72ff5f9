package pushconn

import (
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// poison fills blocks with 0xEE, as an engine that takes them back does.
func poison(t testing.TB, l descriptors.Layout, blocks []int) {
	visit(t, l, blocks, 0, 1<<30, func(p *byte, _, _, _, _ int) { *p = 0xEE })
}

// poisoned reports whether blocks still hold only 0xEE.
func poisoned(t testing.TB, l descriptors.Layout, blocks []int) bool {
	ok := true
	visit(t, l, blocks, 0, 1<<30, func(p *byte, _, _, _, _ int) {
		if *p != 0xEE {
			ok = false
		}
	})
	return ok
}

// Defect 2. Prefill TP 2 -> decode TP 1: rank 0's WRITE is in flight when
// rank 1 fails to post. Decode must keep the blocks (hold the connector.Result back)
// until rank 0's WRITE has ended, so nothing lands in them after the
// engine took them back.
func TestFailedRequestKeepsBlocksUntilTheOtherRanksWriteEnds(t *testing.T) {
	// Slow data, fast notifications: rank 1's PUSH_FAIL arrives while
	// rank 0's 4 KiB are still on their way (about 200 ms).
	r := newRig(t, rigConfig{preTP: 2, decTP: 1,
		fabric: []loopback.FabricOption{loopback.WithModel(loopback.Bandwidth(20_000, time.Millisecond))}})
	_, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.FailPost, From: "prefill-1"})
	require.NoError(t, err)
	c := r.consumers[0]
	dst := blocksFrom(4, 2)
	zero(t, r.decLayout[0], dst)
	require.NoError(t, c.Register("split", Coordinates(r.pre), dst))
	admitted(t, r.producers[0], 1)
	admitted(t, r.producers[1], 1)
	src := blocksFrom(0, 2)
	fill(t, r.preLayout[0], src, 3, 32)
	_, err = r.producers[0].RequestFinished("split", src)
	require.NoError(t, err)
	eventually(t, "rank 0 posted", func() bool { return r.fabric.Counters().Posted >= 1 })
	_, err = r.producers[1].RequestFinished("split", src)
	require.NoError(t, err)
	res := await(t, c, 1)
	require.True(t, isPushFail(res[0].Err, "post"), "got %v", res[0].Err)
	poison(t, r.decLayout[0], dst) // the engine takes the blocks back
	time.Sleep(300 * time.Millisecond)
	require.True(t, poisoned(t, r.decLayout[0], dst), "a WRITE landed in blocks decode had handed back")
	freedOnce(t, r.producers[0], "split")
	freedOnce(t, r.producers[1], "split")
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_sent"), "to rank 0, whose WRITE was in flight")
	require.Equal(t, uint64(1), extra(t, r.producers[0].Stats(), "push_cancel_ack_sent"), "when its WRITE ended")
}

// gate is a TCP proxy to addr that holds every connection until opened.
type gate struct {
	ln   net.Listener
	open chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func newGate(t *testing.T, addr string) *gate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gate{ln: ln, open: make(chan struct{})}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				defer conn.Close()
				<-g.open
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
				go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() { g.release(); _ = ln.Close(); g.wg.Wait() })
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) port() int { return g.ln.Addr().(*net.TCPAddr).Port }

// Defect 3. A registration times out on decode while it waits behind the
// handshake, and the engine registers the same id again (other blocks):
// when the handshake completes only the new registration is sent, and
// prefill writes the new blocks, never the released ones.
func TestTimedOutParkedRegistrationIsNotSentForTheNewRequest(t *testing.T) {
	r := newRig(t, rigConfig{decRank: func(c *Config) { c.RegistrationTimeout = 3 * time.Second }})
	c, p := r.consumers[0], r.producers[0]
	g := newGate(t, net.JoinHostPort(r.pre.Host(), itoa(r.pre.Port())))
	coords := Coordinates(r.pre)
	coords.Port = g.port()
	old, fresh := []int{4}, []int{6}
	zero(t, r.decLayout[0], append(append([]int{}, old...), fresh...))
	require.NoError(t, c.Register("again", coords, old))
	time.Sleep(20 * time.Millisecond) // routed: it waits for the handshake
	r.clock.Advance(3 * time.Second)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	require.NoError(t, c.Register("again", coords, fresh))
	time.Sleep(20 * time.Millisecond)
	g.release()
	eventually(t, "registration received", func() bool { return extra(t, p.Stats(), "registrations_received") >= 1 })
	time.Sleep(30 * time.Millisecond)
	fill(t, r.preLayout[0], []int{1}, 5, 16)
	_, err := p.RequestFinished("again", []int{1})
	require.NoError(t, err)
	res = await(t, c, 1)
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], fresh, 0, 5, 16)
	visit(t, r.decLayout[0], old, 0, 1<<30, func(b *byte, _, _, _, _ int) {
		if *b != 0 {
			t.Fatalf("prefill wrote into the blocks of the registration that timed out")
		}
	})
	require.Equal(t, uint64(1), extra(t, c.Stats(), "registrations_sent"), "the timed-out registration is never sent")
}

// Defect 4. Decode cancels a registration; the request is retried (same
// base id, new suffixes on both sides) and the retry finishes on prefill
// before its registration arrives. The retry is written when its
// registration comes, not freed at once as if it were the cancelled one.
func TestRetryFinishedBeforeItsRegistrationIsWritten(t *testing.T) {
	r := newRig(t, rigConfig{decRank: func(c *Config) { c.RegistrationTimeout = 3 * time.Second }})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("chat-aaaaaaaa", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	r.clock.Advance(3 * time.Second)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	eventually(t, "cancel received", func() bool { return extra(t, p.Stats(), "cancelled_registrations") == 1 })
	fill(t, r.preLayout[0], []int{1}, 8, 16)
	_, err := p.RequestFinished("chat-cccccccc", []int{1}) // the retry, on prefill first
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.Register("chat-bbbbbbbb", Coordinates(r.pre), []int{6}))
	res = await(t, c, 1) // frozen clock: only a WRITE or a PUSH_FAIL ends it
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], []int{6}, 0, 8, 16)
	freedOnce(t, p, "chat-cccccccc")
}

// Defect 5. The same request id registered again (after the first one was
// written and ended) within prefill's registration timeout is a new
// registration, not a duplicate: it is written when the request finishes
// again.
func TestSameIDRegisteredAgainIsNotADuplicate(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	for round, dst := range [][]int{{4}, {6}} {
		require.NoError(t, c.Register("same", Coordinates(r.pre), dst))
		admitted(t, p, uint64(round+1))
		fill(t, r.preLayout[0], []int{1}, 10+round, 16)
		_, err := p.RequestFinished("same", []int{1})
		require.NoError(t, err)
		res := await(t, c, 1)
		require.NoError(t, res[0].Err, "round %d", round)
		check(t, r.decLayout[0], dst, 0, 10+round, 16)
		freedOnce(t, p, "same")
	}
	require.Zero(t, extra(t, p.Stats(), "duplicate_registrations"))
}

// Defect 6. A Register naming the wrong prefill TP size fails with an
// error naming the field and both values, and does not poison the engine:
// a correct Register to it afterwards works; a wrong size after a good
// handshake is refused too, by decode, without a registration sent.
func TestWrongPrefillSizeFailsOnlyThatRequest(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	bad := Coordinates(r.pre)
	bad.TPSize = 2
	require.NoError(t, c.Register("bad", bad, []int{4}))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrInvalid)
	require.ErrorContains(t, res[0].Err, `Prefill.TPSize is 2, prefill engine "prefill" has TP size 1`)
	require.Zero(t, extra(t, c.Stats(), "registrations_sent"))

	require.NoError(t, c.Register("good", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	fill(t, r.preLayout[0], []int{1}, 2, 16)
	_, err := p.RequestFinished("good", []int{1})
	require.NoError(t, err)
	res = await(t, c, 1)
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], []int{4}, 0, 2, 16)

	require.NoError(t, c.Register("bad2", bad, []int{5}))
	res = await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrInvalid)
	require.ErrorContains(t, res[0].Err, "Prefill.TPSize is 2")
	require.Equal(t, uint64(1), extra(t, c.Stats(), "registrations_sent"), "only the good one")
}

// Defect 11. A registration with an id longer than the limit is refused
// when decoded, counted, and never held.
func TestOversizedRegistrationIDsAreRefused(t *testing.T) {
	r := newRig(t, rigConfig{})
	p := r.producers[0]
	require.NoError(t, r.consumers[0].Register("warm", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1) // decode's agent knows prefill's now
	ok := registrationFrom(t, r, "R", []int{1})
	big := strings.Repeat("x", 256<<10)
	msg := strings.Replace(string(ok), "\xaarequest_id\xa1R", "\xaarequest_id\xdb\x00\x04\x00\x00"+big, 1)
	require.NotEqual(t, string(ok), msg)
	for range 4 {
		require.NoError(t, r.decAgents[0].GenNotif(r.preAgents[0].Name(), []byte(msg), nil))
	}
	eventually(t, "refusals counted", func() bool { return extra(t, p.Stats(), "oversized_ids") == 4 })
	s := p.Stats()
	require.Equal(t, uint64(4), s.MalformedNotifications)
	require.Equal(t, uint64(1), extra(t, s, "registrations_received"), "only the good one")
}

// Defect 7, decode: Abort ends a request at once with connector.ErrAborted, cancels
// its registration on prefill (which acknowledges), and releases the
// blocks only then; it is idempotent and counted, and connector.ErrClosed after
// Close.
func TestConsumerAbort(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("gone", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	require.NoError(t, c.Abort("gone"))
	require.NoError(t, c.Abort("gone"), "second call: no-op")
	require.NoError(t, c.Abort("never-registered"))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	require.Contains(t, res[0].Err.Error(), `pushconn: request aborted: request "gone"`)
	cs := c.Stats()
	require.Equal(t, uint64(1), extra(t, cs, "aborted_requests"))
	require.Equal(t, uint64(1), extra(t, cs, "push_cancel_ack_received"), "released on prefill's answer")
	require.Zero(t, extra(t, cs, "cancel_timeouts"))
	require.Equal(t, uint64(1), extra(t, p.Stats(), "push_cancel_ack_sent"))
	// Prefill finishes the request: nothing is written, the blocks are freed.
	_, err := p.RequestFinished("gone", []int{1})
	require.NoError(t, err)
	freedOnce(t, p, "gone")
	require.Zero(t, r.fabric.Counters().Posted)
	require.Empty(t, c.Drain())
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.Abort("x"), connector.ErrClosed)
}

// Without any answer from prefill (its PUSH_CANCELs and acks lost), an
// aborted request's blocks come back at CancelTimeout, counted.
func TestAbortWithoutAnswerReleasesAtCancelTimeout(t *testing.T) {
	r := newRig(t, rigConfig{decRank: func(c *Config) { c.CancelTimeout = 2 * time.Second }})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("lost", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	_, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.DropNotif, From: "decode-0"})
	require.NoError(t, err)
	require.NoError(t, c.Abort("lost"))
	time.Sleep(30 * time.Millisecond)
	require.Empty(t, c.Drain(), "held while prefill may still write")
	require.Equal(t, 1, c.Pending())
	r.clock.Advance(time.Second) // a resend is due
	c.Drain()
	eventually(t, "cancel resent", func() bool { return extra(t, c.Stats(), "push_cancel_sent") >= 2 })
	r.clock.Advance(time.Second)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	require.Equal(t, uint64(1), extra(t, c.Stats(), "cancel_timeouts"))
	require.Zero(t, c.Pending())
}

// Defect 7, prefill: Abort of a finished request withdraws its hold; a
// registration matched to it afterwards is not written and gets PUSH_FAIL;
// a WRITE in flight is left to end and the blocks are freed once, after it.
func TestProducerAbort(t *testing.T) {
	// The fabric's clock stops while the WRITE is in flight, so it stays in
	// flight until the test lets time go on, however slow the machine.
	fc := &freezableClock{}
	r := newRig(t, rigConfig{fabric: []loopback.FabricOption{loopback.WithClock(fc), loopback.WithModel(loopback.FixedLatency(60 * time.Millisecond))}})
	c, p := r.consumers[0], r.producers[0]
	// Aborted before any registration: never written, freed at once.
	_, err := p.RequestFinished("dropped", []int{1})
	require.NoError(t, err)
	require.NoError(t, p.Abort("dropped"))
	require.NoError(t, p.Abort("dropped"), "second call: no-op")
	require.NoError(t, p.Abort("unknown"))
	freedOnce(t, p, "dropped")
	require.NoError(t, c.Register("dropped", Coordinates(r.pre), []int{4}))
	res := await(t, c, 1)
	require.True(t, isPushFail(res[0].Err, "expired"), "got %v", res[0].Err)
	require.Zero(t, r.fabric.Counters().Posted)

	// Aborted while its WRITE is in flight: it ends, then the blocks are freed.
	require.NoError(t, c.Register("busy", Coordinates(r.pre), []int{6}))
	admitted(t, p, 2)
	fill(t, r.preLayout[0], []int{2}, 4, 16)
	fc.freeze()
	_, err = p.RequestFinished("busy", []int{2})
	require.NoError(t, err)
	eventually(t, "posted", func() bool { return r.fabric.Counters().Posted == 1 })
	require.NoError(t, p.Abort("busy"))
	time.Sleep(10 * time.Millisecond) // room for a wrong early release; the WRITE cannot end meanwhile
	require.Empty(t, p.DrainFreed(), "not freed while its WRITE is in flight")
	fc.thaw()
	freedOnce(t, p, "busy")
	res = await(t, c, 1)
	require.NoError(t, res[0].Err, "the WRITE in flight ended normally")
	check(t, r.decLayout[0], []int{6}, 0, 4, 16)
	require.Equal(t, uint64(2), extra(t, p.Stats(), "aborted_requests"))
	require.NoError(t, p.Close())
	require.ErrorIs(t, p.Abort("x"), connector.ErrClosed)
}

func itoa(n int) string { return strconv.Itoa(n) }

// freezableClock is the wall clock, except that between freeze and thaw it
// reads the instant it was frozen at: what the fabric schedules on it
// (a transfer's latency) cannot fall due meanwhile.
type freezableClock struct {
	mu     sync.Mutex
	frozen time.Time
}

func (c *freezableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen.IsZero() {
		return c.frozen
	}
	return time.Now()
}

func (c *freezableClock) freeze() { c.mu.Lock(); c.frozen = time.Now(); c.mu.Unlock() }
func (c *freezableClock) thaw()   { c.mu.Lock(); c.frozen = time.Time{}; c.mu.Unlock() }

// A copy of a registration delivered after decode cancelled the original
// and handed its blocks back (a network that duplicates and delays a
// message) used to wait in the matcher, where a retry of the request
// finishing first paired with it by stripped id and wrote into the
// released blocks. Found by the campaign; prefill now drops copies of
// registrations it has received (same sender, id and registration_seq).
func TestLateCopyOfACancelledRegistrationIsDropped(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	old := blocksFrom(4, 1)
	require.NoError(t, c.Register("cmpl-7-aaaaaaaa", Coordinates(r.pre), old))
	admitted(t, p, 1)
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	require.NoError(t, c.Abort("cmpl-7-aaaaaaaa"))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	poison(t, r.decLayout[0], old) // the engine takes the blocks back

	// The copy: the same bytes as the registration decode sent.
	msg, err := pushwire.EncodeRegistration(&pushwire.Registration{
		RequestID: "cmpl-7-aaaaaaaa", DecodeEngineID: r.dec.ID(), DecodeHost: r.dec.Host(), DecodePort: r.dec.Port(),
		DecodeTPSize: 1, LocalBlockIDs: [][]int{old}, RemoteEngineID: r.pre.ID(), RemoteHost: r.pre.Host(),
		RemotePort: r.pre.Port(), RemoteTPSize: 1, RemotePPSize: 1, DecodeIncarnation: c.incarnation, Seq: seq,
	})
	require.NoError(t, err)
	require.NoError(t, r.decAgents[0].GenNotif(r.preAgents[0].Name(), msg, nil))
	admitted(t, p, 2)
	time.Sleep(20 * time.Millisecond)

	// A retry of the request finishes before its own registration arrives.
	fill(t, r.preLayout[0], blocksFrom(1, 1), 8, 16)
	_, err = p.RequestFinished("cmpl-7-cccccccc", blocksFrom(1, 1))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	require.True(t, poisoned(t, r.decLayout[0], old), "a WRITE landed in blocks decode handed back")
	assert.Equal(t, uint64(1), extra(t, p.Stats(), "duplicate_registrations"))
	fresh := blocksFrom(5, 1)
	require.NoError(t, c.Register("cmpl-7-dddddddd", Coordinates(r.pre), fresh))
	res = await(t, c, 1)
	require.NoError(t, res[0].Err)
	require.Positive(t, check(t, r.decLayout[0], fresh, 0, 8, 16), "the retry's own blocks hold its bytes")
}

// sendHook runs hook before the first PUSH_REG it is asked to send.
type sendHook struct {
	nixl.Agent
	once sync.Once
	hook func()
}

func (a *sendHook) GenNotif(remote string, msg []byte, opts *nixl.Options) error {
	if strings.HasPrefix(string(msg), pushwire.RegPrefix) && a.hook != nil {
		a.once.Do(a.hook)
	}
	return a.Agent.GenNotif(remote, msg, opts)
}

// An Abort that lands while decode is sending a registration to its prefill
// ranks (TP 2 -> 1: after the first, before the second) used to owe a
// PUSH_CANCEL only to the first; the second still got the registration and
// wrote into blocks already handed back. Found by the campaign: a full
// block of an aborted request's bytes in released blocks.
func TestAbortWhileRegisteringCancelsEveryRankThatGetsTheRegistration(t *testing.T) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	var hooked *sendHook
	r := newRig(t, rigConfig{preTP: 2, decTP: 1, newAgent: func(t testing.TB, name string) nixl.Agent {
		a, err := fab.NewAgent(name)
		require.NoError(t, err)
		if strings.HasPrefix(name, "decode") {
			hooked = &sendHook{Agent: a}
			return hooked
		}
		return a
	}})
	c := r.consumers[0]
	dst := blocksFrom(4, 2)
	hooked.hook = func() { require.NoError(t, c.Abort("torn")) }
	require.NoError(t, c.Register("torn", Coordinates(r.pre), dst))
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	poison(t, r.decLayout[0], dst) // the engine takes the blocks back
	src := blocksFrom(0, 2)
	for j, p := range r.producers {
		fill(t, r.preLayout[j], src, 9, 32)
		_, err := p.RequestFinished("torn", src)
		require.NoError(t, err)
	}
	time.Sleep(50 * time.Millisecond)
	require.True(t, poisoned(t, r.decLayout[0], dst), "a prefill rank wrote into blocks decode handed back")
}

// holdFirstReg keeps the first PUSH_REG naming id it is asked to send (a
// network that delays it), to be delivered later by the test.
type holdFirstReg struct {
	nixl.Agent
	id   string
	mu   sync.Mutex
	held []byte
	to   string
}

func (a *holdFirstReg) GenNotif(remote string, msg []byte, opts *nixl.Options) error {
	a.mu.Lock()
	if a.held == nil && strings.HasPrefix(string(msg), pushwire.RegPrefix) && strings.Contains(string(msg), a.id) {
		a.held, a.to = append([]byte(nil), msg...), remote
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	return a.Agent.GenNotif(remote, msg, opts)
}

// A PUSH_CANCEL that overtakes its PUSH_REG (the registration delayed by
// the network) is acknowledged at once — prefill holds nothing of it — and
// decode hands the blocks back; the registration, when it comes, used to be
// admitted, and the request's WRITE landed in the released blocks. Found by
// the long push campaign (1 write after release in 31,911 requests).
// Prefill now remembers a cancel of a registration it never received. The
// seq-less case: a cancel names no blocks, so every seq-less registration
// of that sender and id is refused until prefill's registration timeout.
func TestRegistrationArrivingAfterItsCancelIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []requestOption
	}{{"with seq", nil}, {"seq-less", []requestOption{withoutSeq()}}} {
		t.Run(tc.name, func(t *testing.T) {
			fab, err := loopback.NewFabric()
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, fab.Close()) })
			var dec *holdFirstReg
			r := newRig(t, rigConfig{newAgent: func(t testing.TB, name string) nixl.Agent {
				a, err := fab.NewAgent(name)
				require.NoError(t, err)
				if strings.HasPrefix(name, "decode") {
					dec = &holdFirstReg{Agent: a, id: "late-request"}
					return dec
				}
				return a
			}})
			c, p := r.consumers[0], r.producers[0]
			// A request first, so that prefill knows decode's agent and its
			// ack of the cancel is delivered at once.
			pushOne(t, r, true, "before", "before", blocksFrom(0, 1), blocksFrom(0, 1), 16)
			dst := blocksFrom(4, 2)
			require.NoError(t, c.Register("late-request", Coordinates(r.pre), dst, tc.opts...))
			eventually(t, "the registration sent (and held back)", func() bool {
				dec.mu.Lock()
				defer dec.mu.Unlock()
				return dec.held != nil
			})
			require.NoError(t, c.Abort("late-request"))
			res := await(t, c, 1)
			require.ErrorIs(t, res[0].Err, connector.ErrAborted, "prefill acknowledged the cancel of a registration it never saw")
			poison(t, r.decLayout[0], dst) // the engine takes the blocks back

			// The delayed registration arrives, then prefill finishes the request.
			require.NoError(t, dec.Agent.GenNotif(dec.to, dec.held, nil))
			eventually(t, "the late registration received", func() bool { return extra(t, p.Stats(), "registrations_received") == 2 })
			eventually(t, "the late registration dropped", func() bool {
				return extra(t, p.Stats(), "registrations_cancelled_before_arrival") == 1
			})
			fill(t, r.preLayout[0], blocksFrom(1, 2), 3, 32)
			_, err = p.RequestFinished("late-request", blocksFrom(1, 2))
			require.NoError(t, err)
			time.Sleep(50 * time.Millisecond)
			require.True(t, poisoned(t, r.decLayout[0], dst), "a WRITE landed in blocks decode handed back")
			assert.Equal(t, uint64(1), extra(t, p.Stats(), "registrations_cancelled_before_arrival"))
			assert.Equal(t, uint64(1), p.Stats().Transfers, "only the first request's WRITE")
		})
	}
}
