package pushconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/pushconn/internal/match"
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
