//go:build nixl

package nixl

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireNIXLErr requires err to match target, a status that NIXL's agent
// returns, or, over the C API, which reports the agent's failures outside
// its own few statuses as NIXL_ERR_BACKEND (capi.h), ErrBackend.
func requireNIXLErr(t *testing.T, err, target error, msgAndArgs ...any) {
	t.Helper()
	if viaCAPI && errors.Is(err, ErrBackend) {
		return
	}
	require.ErrorIs(t, err, target, msgAndArgs...)
}
