//go:build nixl

package pushconn

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A prefill of 2 pipeline stages x TP 2 pushing into decode TP 2 over real
// NIXL agents (UCX): every stage's ranks write their own layers, every
// byte checked.
func TestNativePipelinePrefill(t *testing.T) {
	r := newRig(t, rigConfig{newAgent: nativeAgent, prePP: 2, preTP: 2, decTP: 2})
	require.Len(t, r.producers, 4)
	pushOne(t, r, true, "pp", "pp", blocksFrom(2, 3), blocksFrom(40, 3), 45)
	for _, p := range r.producers {
		require.Equal(t, uint64(1), p.Stats().Transfers)
	}
}
