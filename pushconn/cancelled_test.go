package pushconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/pushconn/internal/match"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// A cancelled registration frees the first request that names it (exact
// id or transfer id, not the stripped id: that may be a retry), once for
// all the decode ranks it was sent to, and only until its registration
// timeout.
func TestCancelledRegsTakeOnceWithinTheTimeout(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := newCancelledRegs(4)
	c.add(match.Key{RequestID: "a-0123abcd"}, now.Add(time.Second)) // decode rank 0
	c.add(match.Key{RequestID: "a-0123abcd"}, now.Add(time.Second)) // decode rank 1
	c.add(match.Key{RequestID: "b", TransferID: "tb"}, now.Add(time.Second))
	require.False(t, c.take(match.Key{RequestID: "x"}, now))
	require.False(t, c.take(match.Key{RequestID: "a-55555555"}, now), "stripped id: maybe a retry")
	require.True(t, c.take(match.Key{RequestID: "a-0123abcd"}, now), "exact id")
	require.False(t, c.take(match.Key{RequestID: "a-0123abcd"}, now), "every rank's entry taken at once")
	require.False(t, c.take(match.Key{RequestID: "b", TransferID: "tc"}, now), "conflicting transfer ids")
	require.False(t, c.take(match.Key{RequestID: "y", TransferID: "tb"}, now.Add(2*time.Second)), "past its timeout")
	require.True(t, c.take(match.Key{RequestID: "y", TransferID: "tb"}, now), "transfer id")
	require.Empty(t, c.byID)
	require.Empty(t, c.byTID)
}

// A seq-less registration is a copy of an ended one only with the same
// sender, ids and block lists, and only until the deadline; a cancel of
// one never received refuses every block list of its sender and ids.
func TestSeqlessEndedCopies(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	e := newSeqlessEnded(8)
	reg := func(id, tid string, blocks ...int) *pushwire.Registration {
		return &pushwire.Registration{RequestID: id, TransferID: tid, LocalBlockIDs: [][]int{blocks}}
	}
	e.ended("d0", reg("a", "", 1, 2), now.Add(time.Second))
	require.Equal(t, copyOfEnded, e.copyOf(now, "d0", reg("a", "", 1, 2)))
	require.Equal(t, copyNone, e.copyOf(now, "d0", reg("a", "", 1, 3)), "other blocks: a new registration")
	require.Equal(t, copyNone, e.copyOf(now, "d0", reg("a", "", 1)), "fewer blocks")
	require.Equal(t, copyNone, e.copyOf(now, "d0", &pushwire.Registration{RequestID: "a", LocalBlockIDs: [][]int{{1}, {2}}}), "the same ids in two groups")
	require.Equal(t, copyNone, e.copyOf(now, "d1", reg("a", "", 1, 2)), "another sender")
	require.Equal(t, copyNone, e.copyOf(now, "d0", reg("a", "t", 1, 2)), "another transfer id")
	require.Equal(t, copyNone, e.copyOf(now.Add(time.Second), "d0", reg("a", "", 1, 2)), "past the deadline")

	e.cancelledUnseen("d0", "b", "", now.Add(time.Second))
	require.Equal(t, copyCancelledFirst, e.copyOf(now, "d0", reg("b", "", 7)))
	require.Equal(t, copyCancelledFirst, e.copyOf(now, "d0", reg("b", "")), "no blocks")
	require.Equal(t, copyNone, e.copyOf(now, "d1", reg("b", "", 7)))

	// Bounded: the oldest entries go first.
	for i := range 8 {
		e.ended("d2", reg("c", "", i), now.Add(time.Second))
	}
	require.Equal(t, copyNone, e.copyOf(now, "d0", reg("a", "", 1, 2)), "forgotten by the ring")
	require.Equal(t, copyOfEnded, e.copyOf(now, "d2", reg("c", "", 7)))
	require.Len(t, e.seen.set, 8)
}
