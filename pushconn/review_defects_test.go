package pushconn

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Found in review (1): PUSH_CANCEL_ACK names only the request id: an ack that answers
// a resent PUSH_CANCEL of an earlier request of the same id settles the
// newer request of that id while it drains, and its connector.Result comes out while
// the prefill rank's WRITE into its blocks is still in flight.
func TestStaleAckOfAnEarlierRegistrationDoesNotReleaseANewerOne(t *testing.T) {
	fc := connector.NewManualClock(rigStart)
	// One 4 KiB block takes 100 s of fabric time.
	fab, err := loopback.NewFabric(loopback.WithClock(fc), loopback.WithModel(loopback.Bandwidth(4096.0/100, 0)))
	require.NoError(t, err)
	r := newRig(t, rigConfig{
		decRank: func(c *Config) { c.CancelTimeout = 2 * time.Second }, // resend every 500 ms
		newAgent: func(t testing.TB, name string) nixl.Agent {
			a, err := fab.NewAgent(name)
			require.NoError(t, err)
			return a
		}})
	c, p := r.consumers[0], r.producers[0]

	// Request "x", first time: registered, then aborted.
	require.NoError(t, c.Register("x", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	// prefill -> decode: the first ack takes 10 s, the second 20 s.
	_, err = fab.AddFault(loopback.Fault{Kind: loopback.DelayNotif, From: "prefill-0", To: "decode-0", Count: 1, Delay: 10 * time.Second})
	require.NoError(t, err)
	_, err = fab.AddFault(loopback.Fault{Kind: loopback.DelayNotif, From: "prefill-0", To: "decode-0", Count: 1, Delay: 20 * time.Second})
	require.NoError(t, err)
	require.NoError(t, c.Abort("x"))
	eventually(t, "ack 1 sent", func() bool { return extra(t, p.Stats(), "push_cancel_ack_sent") == 1 })
	r.clock.Advance(500 * time.Millisecond) // decode resends its PUSH_CANCEL
	c.Drain()
	eventually(t, "ack 2 sent", func() bool { return extra(t, p.Stats(), "push_cancel_ack_sent") == 2 })
	fc.Advance(10 * time.Second) // ack 1 arrives: the first "x" is out
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)

	// Request "x", second time, other blocks; prefill finishes it and the
	// WRITE starts (100 s of fabric time).
	dst := []int{6}
	poison(t, r.decLayout[0], dst)
	require.NoError(t, c.Register("x", Coordinates(r.pre), dst))
	admitted(t, p, 2)
	fill(t, r.preLayout[0], []int{1}, 3, 16)
	_, err = p.RequestFinished("x", []int{1})
	require.NoError(t, err)
	eventually(t, "WRITE posted", func() bool { return fab.Counters().Posted == 1 })
	require.NoError(t, c.Abort("x")) // drains: prefill acks when the WRITE ends
	eventually(t, "cancel received", func() bool { return extra(t, p.Stats(), "push_cancel_received") == 3 })

	fc.Advance(10 * time.Second) // ack 2 (of the first "x") arrives
	time.Sleep(50 * time.Millisecond)
	out := c.Drain()
	require.Zero(t, fab.Counters().Completed, "the WRITE is still in flight")
	if len(out) > 0 { // the engine takes the blocks back
		poison(t, r.decLayout[0], dst)
	}
	fc.Advance(200 * time.Second) // the WRITE lands; prefill acks the real cancel
	eventually(t, "WRITE landed", func() bool { c.Drain(); return fab.Counters().Completed == 1 })
	time.Sleep(20 * time.Millisecond)
	assert.Empty(t, out, "the second x's connector.Result came out while prefill's WRITE into its blocks was in flight")
	if len(out) > 0 {
		require.True(t, poisoned(t, r.decLayout[0], dst), "the WRITE landed in blocks decode had handed back")
	}
}

// refuseRelease is an agent whose backend cannot cancel a transfer in
// flight: ReleaseXferReq returns ErrRepostActive and the transfer goes on,
// as the native agent documents.
type refuseRelease struct{ nixl.Agent }

func (a refuseRelease) ReleaseXferReq(h nixl.XferHandle) error {
	if st, err := a.Agent.XferStatus(h); err == nil && st == nixl.StatusInProgress {
		return nixl.ErrRepostActive
	}
	return a.Agent.ReleaseXferReq(h)
}

// Found in review (2): At the write timeout prefill releases the WRITE, ignores the
// agent's refusal (ErrRepostActive: still in flight), sends PUSH_FAIL and
// frees the blocks; decode hands its blocks back on the PUSH_FAIL; the
// WRITE then lands in them.
func TestUnreleasedWriteKeepsBlocksOnBothSides(t *testing.T) {
	fc := connector.NewManualClock(rigStart)
	fab, err := loopback.NewFabric(loopback.WithClock(fc), loopback.WithModel(loopback.Bandwidth(4096.0/100, 0)))
	require.NoError(t, err)
	r := newRig(t, rigConfig{
		preRank: func(c *Config) { c.WriteTimeout = time.Second },
		newAgent: func(t testing.TB, name string) nixl.Agent {
			a, err := fab.NewAgent(name)
			require.NoError(t, err)
			if strings.HasPrefix(name, "prefill") {
				return refuseRelease{a}
			}
			return a
		}})
	c, p := r.consumers[0], r.producers[0]
	dst := []int{4}
	zero(t, r.decLayout[0], dst)
	require.NoError(t, c.Register("x", Coordinates(r.pre), dst))
	admitted(t, p, 1)
	fill(t, r.preLayout[0], []int{1}, 3, 16)
	_, err = p.RequestFinished("x", []int{1})
	require.NoError(t, err)
	eventually(t, "WRITE posted", func() bool { return fab.Counters().Posted == 1 })
	r.clock.Advance(time.Second) // the write timeout
	// The agent will not let go of the WRITE: decode hears nothing and
	// prefill frees nothing while it may still move bytes.
	time.Sleep(50 * time.Millisecond)
	assert.Empty(t, c.Drain(), "no connector.Result while the WRITE may still land")
	assert.Empty(t, p.DrainFreed(), "no free while the WRITE may still read")
	fc.Advance(200 * time.Second) // the WRITE lands; the agent lets go
	res := await(t, c, 1)
	if res[0].Err == nil {
		require.Positive(t, check(t, r.decLayout[0], dst, 0, 3, 16), "done only with the whole WRITE landed")
	} else {
		require.True(t, isPushFail(res[0].Err, "transfer"), "got %v", res[0].Err)
	}
	freedOnce(t, p, "x")
}

// Found in review (3): registration_seq restarts at 1 with every decode instance, and
// prefill's duplicate memory (seen ring, matcher tombstones) keys on
// (sender, request id, seq) without the incarnation: after a decode
// restart, a request id the dead instance registered as its n-th
// registration, registered again as the new instance's n-th within
// prefill's registration timeout, is dropped as a duplicate and never
// written (decode waits for its registration timeout).
func TestRestartedDecodeSameIDIsNotADuplicate(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	port := r.dec.Port()
	require.NoError(t, c.Register("req-1", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	_, err := p.RequestFinished("req-1", []int{1})
	require.NoError(t, err)
	res := await(t, c, 1)
	require.NoError(t, res[0].Err)
	freedOnce(t, p, "req-1")

	crashDecode(t, r)
	d := restartDecode(t, r, port)
	require.NoError(t, d.consumer.Register("req-1", Coordinates(r.pre), []int{6})) // seq 1 again
	eventually(t, "received", func() bool { return extra(t, p.Stats(), "registrations_received") == 2 })
	time.Sleep(50 * time.Millisecond)
	assert.Zero(t, extra(t, p.Stats(), "duplicate_registrations"), "the new instance's registration was taken for a copy of the dead one's")
	fill(t, r.preLayout[0], []int{2}, 5, 16)
	_, err = p.RequestFinished("req-1", []int{2})
	require.NoError(t, err)
	res = await(t, d.consumer, 1)
	require.NoError(t, res[0].Err)
	check(t, d.layout, []int{6}, 0, 5, 16)
}
