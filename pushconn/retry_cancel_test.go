package pushconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Decode cancels a registration whose request has not finished, and the
// request is retried: decode registers again under a new suffix. The
// cancelled registration has left prefill's matcher, so the retry's
// finished blocks pair with the live registration and are written, instead
// of being freed without a WRITE while the live one waits out its timeout.
func TestCancelledRegistrationDoesNotTakeRetrysMatch(t *testing.T) {
	r := newRig(t, rigConfig{decRank: func(c *Config) { c.RegistrationTimeout = 3 * time.Second }})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("chat-aaaaaaaa", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	r.clock.Advance(3 * time.Second) // decode gives up, sends PUSH_CANCEL
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	eventually(t, "cancel received", func() bool { return extra(t, p.Stats(), "cancelled_registrations") == 1 })

	// The proxy retries; decode registers again (new engine suffix).
	require.NoError(t, c.Register("chat-bbbbbbbb", Coordinates(r.pre), []int{6}))
	admitted(t, p, 2)
	time.Sleep(20 * time.Millisecond)
	fill(t, r.preLayout[0], []int{1}, 9, 16)
	_, err := p.RequestFinished("chat-cccccccc", []int{1})
	require.NoError(t, err)
	res = await(t, c, 1) // frozen clock: only a completion or a PUSH_FAIL ends it
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], []int{6}, 0, 9, 16)
}

// As above with the exact same request id registered again after the
// cancel: the new registration is admitted, not dropped as a duplicate.
func TestReRegisterSameIDAfterCancelIsWritten(t *testing.T) {
	r := newRig(t, rigConfig{decRank: func(c *Config) { c.RegistrationTimeout = 3 * time.Second }})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("req", Coordinates(r.pre), []int{4}))
	admitted(t, p, 1)
	r.clock.Advance(3 * time.Second)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, ErrRegistrationTimeout)
	eventually(t, "cancel received", func() bool { return extra(t, p.Stats(), "cancelled_registrations") == 1 })
	require.NoError(t, c.Register("req", Coordinates(r.pre), []int{6}))
	admitted(t, p, 2)
	time.Sleep(20 * time.Millisecond)
	fill(t, r.preLayout[0], []int{1}, 9, 16)
	_, err := p.RequestFinished("req", []int{1})
	require.NoError(t, err)
	res = await(t, c, 1)
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], []int{6}, 0, 9, 16)
}
