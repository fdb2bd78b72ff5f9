package pushconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Decode's own registration timeout ends the request and the engine reuses
// the blocks: prefill must drop the registration (PUSH_CANCEL) instead of
// WRITEing into them when the request finishes, and free its blocks at once.
func TestNoWriteAfterDecodeTimedOut(t *testing.T) {
	r := newRig(t, rigConfig{decRank: func(c *Config) { c.RegistrationTimeout = 3 * time.Second }})
	c, p := r.consumers[0], r.producers[0]
	dst := blocksFrom(4, 2)
	require.NoError(t, c.Register("late", Coordinates(r.pre), dst))
	admitted(t, p, 1)
	r.clock.Advance(3 * time.Second)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_sent"))
	eventually(t, "cancel received", func() bool { return extra(t, p.Stats(), "cancelled_registrations") == 1 })
	// The engine hands blocks 4,5 to another request.
	zero(t, r.decLayout[0], dst)
	src := blocksFrom(0, 2)
	fill(t, r.preLayout[0], src, 7, 32)
	_, err := p.RequestFinished("late", src)
	require.NoError(t, err)
	freedOnce(t, p, "late") // at once, not at the lease
	require.Zero(t, r.fabric.Counters().Posted, "prefill WRITE into blocks of a request decode already ended")
	ps := p.Stats()
	require.Equal(t, uint64(1), extra(t, ps, "push_cancel_received"))
	require.Zero(t, ps.ExpiredRequests)
	// The cancelled registration's own expiry sends decode nothing more.
	r.clock.Advance(defaultProducerRegistrationTimeout)
	p.DrainFreed()
	time.Sleep(20 * time.Millisecond)
	require.Zero(t, extra(t, p.Stats(), "push_fail_sent"))
	require.Zero(t, extra(t, p.Stats(), "unmatched_expired"))
}

// Prefill TP 2 -> decode TP 1: rank 1 fails (it closes and sends
// PUSH_FAIL), decode fails the request at once and tells rank 0, which
// then writes nothing into the blocks decode released.
func TestNoWriteAfterOtherRankFailed(t *testing.T) {
	r := newRig(t, rigConfig{preTP: 2, decTP: 1})
	c := r.consumers[0]
	dst := blocksFrom(4, 2)
	require.NoError(t, c.Register("split", Coordinates(r.pre), dst))
	admitted(t, r.producers[0], 1)
	admitted(t, r.producers[1], 1)
	require.NoError(t, r.producers[1].Close())
	res := await(t, c, 1)
	require.True(t, isPushFail(res[0].Err, "closed"), "got %v", res[0].Err)
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_sent"), "only to the rank that did not fail")
	zero(t, r.decLayout[0], dst) // new owner
	src := blocksFrom(0, 2)
	_, err := r.producers[0].RequestFinished("split", src)
	require.NoError(t, err)
	freedOnce(t, r.producers[0], "split")
	require.Zero(t, r.fabric.Counters().Posted, "rank 0 WRITEs into blocks decode already released")
	require.Equal(t, uint64(1), extra(t, r.producers[0].Stats(), "cancelled_registrations"))
}

// Closing the Consumer ends its requests and cancels their registrations.
func TestConsumerCloseCancelsRegistrations(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("a", Coordinates(r.pre), []int{1}, withTransferID("t-a")))
	require.NoError(t, c.Register("b", Coordinates(r.pre), []int{2}))
	admitted(t, p, 2)
	require.NoError(t, c.Close())
	require.Len(t, c.Drain(), 2)
	require.Equal(t, uint64(2), extra(t, c.Stats(), "push_cancel_sent"))
	eventually(t, "cancels received", func() bool { return extra(t, p.Stats(), "cancelled_registrations") == 2 })
	_, err := p.RequestFinished("a", []int{0}, withTransferID("t-a"))
	require.NoError(t, err)
	_, err = p.RequestFinished("b", []int{0})
	require.NoError(t, err)
	freedOnce(t, p, "a", "b")
	require.Zero(t, r.fabric.Counters().Posted)
}

// A PUSH_CANCEL that names no waiting registration, or is malformed,
// changes nothing but counters.
func TestStrayOrMalformedCancelChangesNothing(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("keep", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	send := func(msg string) {
		require.NoError(t, r.decAgents[0].GenNotif(r.preAgents[0].Name(), []byte(msg), nil))
	}
	send("PUSH_CANCEL:\x83\xaarequest_id\xa5other\xa9engine_id\xa6decode\xa4rank\x00")
	send("PUSH_CANCEL:\x81\xaarequest_id\xa4keep") // no engine_id, rank
	eventually(t, "both handled", func() bool {
		return extra(t, p.Stats(), "push_cancel_received") == 1 && p.Stats().MalformedNotifications == 1
	})
	require.Zero(t, extra(t, p.Stats(), "cancelled_registrations"))
	fill(t, r.preLayout[0], []int{0}, 3, 16)
	_, err := p.RequestFinished("keep", []int{0})
	require.NoError(t, err)
	res := await(t, c, 1)
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], []int{4}, 0, 3, 16)
}
