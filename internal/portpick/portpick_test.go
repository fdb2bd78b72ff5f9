package portpick

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func withRange(t *testing.T, content string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "range")
	require.NoError(t, os.WriteFile(f, []byte(content), 0o600))
	old := rangeFile
	rangeFile = f
	t.Cleanup(func() { rangeFile = old })
}

// A picked port lies below the ephemeral range and can be bound.
func TestPickIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	withRange(t, "32768\t60999\n")
	for range 20 {
		p, err := Pick()
		require.NoError(t, err)
		require.GreaterOrEqual(t, p, lowest)
		require.Less(t, p, 32768)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		require.NoError(t, err, "port %d", p)
		l.Close()
	}
}

// With no room below the ephemeral range, the kernel picks.
func TestPickFallsBackWhenTheRangeStartsLow(t *testing.T) {
	withRange(t, "10500 60999\n")
	p, err := Pick()
	require.NoError(t, err)
	require.Positive(t, p)
}

func TestEphemeralLowReadsOrDefaults(t *testing.T) {
	withRange(t, "20000 30000\n")
	require.Equal(t, 20000, ephemeralLow())
	withRange(t, "garbage")
	require.Equal(t, defaultEphemeralLow, ephemeralLow())
	withRange(t, "0 1")
	require.Equal(t, defaultEphemeralLow, ephemeralLow())
	rangeFile = filepath.Join(t.TempDir(), "missing")
	require.Equal(t, defaultEphemeralLow, ephemeralLow())
}
