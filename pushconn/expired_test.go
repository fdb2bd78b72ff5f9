package pushconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/pushconn/internal/match"
)

// Finished blocks whose lease expired before decode's registration came:
// decode hears at once that they are gone instead of waiting for its
// registration timeout (480 s by default).
func TestRegistrationAfterLeaseExpiryFailsFast(t *testing.T) {
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.Lease = time.Second }})
	c, p := r.consumers[0], r.producers[0]
	_, err := p.RequestFinished("gone-0123abcd", blocksFrom(0, 1))
	require.NoError(t, err)
	r.clock.Advance(time.Second)
	freedOnce(t, p, "gone-0123abcd")
	require.NoError(t, c.Register("gone-0123abcd", Coordinates(r.pre), []int{3})) // names the lapsed request itself
	admitted(t, p, 1)
	res := await(t, c, 1) // on the frozen clock: only a PUSH_FAIL can end it
	require.True(t, isPushFail(res[0].Err, "expired"), "got %v", res[0].Err)
	require.Contains(t, res[0].Err.Error(), "lease (1s) ran out before this registration arrived")
	require.Equal(t, uint64(1), extra(t, p.Stats(), "registrations_after_lease"))
	require.Zero(t, r.fabric.Counters().Posted)

	// The same id finishing again pairs normally.
	fill(t, r.preLayout[0], []int{1}, 4, 16)
	_, err = p.RequestFinished("gone-0123abcd", []int{1})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // the writer takes the finished request
	require.NoError(t, c.Register("gone-0123abcd", Coordinates(r.pre), []int{5}))
	res = await(t, c, 1)
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], []int{5}, 0, 4, 16)
}

func TestLapsedRingMatchesLikeTheMatcher(t *testing.T) {
	l := newLapsed(2)
	require.False(t, l.has(match.Key{RequestID: "a"}))
	l.add(match.Key{RequestID: "a-0123abcd", TransferID: "ta"})
	require.True(t, l.has(match.Key{RequestID: "x", TransferID: "ta"}), "transfer id")
	require.True(t, l.has(match.Key{RequestID: "a-0123abcd"}), "exact id")
	require.False(t, l.has(match.Key{RequestID: "a-ffffffff"}), "stripped id: may be a retry, whose blocks are to come")
	require.False(t, l.has(match.Key{RequestID: "a-0123abcd", TransferID: "tb"}), "conflicting transfer ids do not pair")
	l.add(match.Key{RequestID: "b"})
	l.add(match.Key{RequestID: "c"}) // evicts a
	require.False(t, l.has(match.Key{RequestID: "a-0123abcd"}), "oldest forgotten")
	require.True(t, l.has(match.Key{RequestID: "b"}))
	l.forget(match.Key{RequestID: "b"})
	require.False(t, l.has(match.Key{RequestID: "b"}), "finished again")
	require.True(t, l.has(match.Key{RequestID: "c"}))
	l.add(match.Key{RequestID: "d"})
	l.add(match.Key{RequestID: "e"})
	require.False(t, l.has(match.Key{RequestID: "c"}))
	require.Len(t, l.byID, 2)
}

// A request that finishes drops every lapsed key it would pair with, so
// none of them refuses a registration meant for its blocks.
func TestLapsedRingForgetsWhatAFinishedRequestPairsWith(t *testing.T) {
	l := newLapsed(8)
	l.add(match.Key{RequestID: "a-0123abcd"})
	l.add(match.Key{RequestID: "a-89abcdef", TransferID: "ta"})
	l.add(match.Key{RequestID: "x", TransferID: "tx"})
	l.add(match.Key{RequestID: "b-0123abcd", TransferID: "tb"})
	l.forget(match.Key{RequestID: "a-55555555"}) // a retry of a: same base
	require.False(t, l.has(match.Key{RequestID: "a-0123abcd"}))
	require.False(t, l.has(match.Key{RequestID: "a-89abcdef", TransferID: "ta"}))
	l.forget(match.Key{RequestID: "y", TransferID: "tx"}) // same transfer id
	require.False(t, l.has(match.Key{RequestID: "q", TransferID: "tx"}))
	l.forget(match.Key{RequestID: "b-ffffffff", TransferID: "tc"}) // same base, other transfer id: no pair
	require.True(t, l.has(match.Key{RequestID: "b-0123abcd"}))
	require.Len(t, l.byID, 1)
	require.Len(t, l.byBas, 1)
}
