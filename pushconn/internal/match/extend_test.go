package match

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Extend moves a waiting finished request's lease later, never earlier,
// only under its exact id, and the expiry order follows the new deadlines.
func TestExtendMovesLeaseLaterOnly(t *testing.T) {
	m := newM(t) // FinishedTTL 30 s
	for _, id := range []string{"a-1a2b3c4d", "b", "c"} {
		_, err := m.Finish(t0, Key{RequestID: id}, id)
		require.NoError(t, err)
	}
	require.Equal(t, 1, m.Extend(t0.Add(50*time.Second), "a-1a2b3c4d", "a", "nobody"), "exact ids only")
	require.Equal(t, 0, m.Extend(t0.Add(10*time.Second), "b"), "never shortened")
	require.Equal(t, 1, m.Extend(t0.Add(40*time.Second), "b"))
	next, ok := m.Next()
	require.True(t, ok)
	require.Equal(t, t0.Add(30*time.Second), next, "c is now the first to go")

	_, fins := m.Expire(t0.Add(30 * time.Second))
	require.Len(t, fins, 1)
	require.Equal(t, "c", fins[0].Fin)
	_, fins = m.Expire(t0.Add(40 * time.Second))
	require.Len(t, fins, 1)
	require.Equal(t, "b", fins[0].Fin)
	_, fins = m.Expire(t0.Add(50*time.Second - time.Nanosecond))
	require.Empty(t, fins)
	_, fins = m.Expire(t0.Add(50 * time.Second))
	require.Len(t, fins, 1)
	require.Equal(t, "a-1a2b3c4d", fins[0].Fin)
	require.Zero(t, m.Extend(t0.Add(time.Hour), "a-1a2b3c4d"), "nothing waits any more")
}
