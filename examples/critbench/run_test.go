package critbench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/nixl/loopback"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunEveryModeMovesAndVerifiesBytes(t *testing.T) {
	for _, mode := range []Mode{Pull, PullInline, Push} {
		t.Run(string(mode), func(t *testing.T) {
			rep, err := Run(t.Context(), Config{Mode: mode, PrefillTP: 2, DecodeTP: 2, Requests: 40, Rate: 2000,
				PrefillTime: time.Millisecond, Link: loopback.Bandwidth(2e9, 20*time.Microsecond)})
			require.NoError(t, err)
			require.Equal(t, 40, rep.Done)
			require.Zero(t, rep.Failed)
			// 40 requests x 4 blocks x 4 regions x 16 tokens x 8 heads x 32 bytes.
			const total = 40 * 4 * 4 * 16 * 8 * 32
			require.Equal(t, uint64(total), rep.BytesMoved)
			require.Equal(t, uint64(total), rep.BytesVerified)
			require.Equal(t, 40, rep.Critical.Count)
			require.Positive(t, rep.Critical.P50)
			require.LessOrEqual(t, rep.Critical.P50, rep.Critical.P99)
		})
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	_, err := Run(t.Context(), Config{Mode: "carrier-pigeon", Requests: 1})
	require.ErrorContains(t, err, `mode "carrier-pigeon" is not`)
	_, err = Run(t.Context(), Config{Mode: Push, Requests: 1, PrefillTP: 3})
	require.ErrorContains(t, err, "TP sizes 3 and 1 must divide 8 heads")
}
