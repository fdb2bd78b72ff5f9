package match

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The time line's shortcut gives what adding first gives, and saturates.
func TestTimelineAfter(t *testing.T) {
	var l timeline
	t0 := time.Unix(1_700_000_000, 5)
	require.Equal(t, int64(0), l.at(t0))
	now := time.Now() // with a monotonic reading
	for _, d := range []time.Duration{0, 1, 480 * time.Second} {
		require.Equal(t, l.at(now.Add(d)), l.after(now, d))
		require.Equal(t, l.at(t0.Add(-d).Add(d)), l.after(t0.Add(-d), d))
	}
	require.Equal(t, int64(math.MaxInt64), l.after(t0.Add(200*365*24*time.Hour), 200*365*24*time.Hour))
}
