//go:build nixl

package pushconn

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

func init() {
	// UCX over loopback only.
	if _, set := os.LookupEnv("UCX_NET_DEVICES"); !set {
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
}

// nativeAgent creates a real NIXL agent with a UCX backend over shared
// memory, progressed by the connectors' pollers (no NIXL progress thread).
func nativeAgent(t testing.TB, name string) nixl.Agent {
	a, err := nixl.New(t.Name()+"."+name, nixl.Config{})
	require.NoError(t, err)
	if err := a.CreateBackend("UCX", map[string]string{"ucx_error_handling_mode": "none"}); err != nil {
		a.Close()
		t.Fatalf("create UCX backend: %v", err)
	}
	return a
}

func TestNativeRegistrationBeforeFinish(t *testing.T) {
	r := newRig(t, rigConfig{newAgent: nativeAgent})
	pushOne(t, r, true, "req-1", "req-1", blocksFrom(3, 4), blocksFrom(10, 4), 4*16)
	require.Equal(t, uint64(1), r.producers[0].Stats().Transfers)
}

func TestNativeRegistrationAfterFinishStripped(t *testing.T) {
	r := newRig(t, rigConfig{newAgent: nativeAgent})
	pushOne(t, r, false, "cmpl-9-0-aaaaaaaa", "cmpl-9-0-BBBBBBBB", blocksFrom(0, 3), blocksFrom(20, 3), 40)
	require.Equal(t, uint64(1), extra(t, r.producers[0].Stats(), "matched_stripped"))
}

func TestNativePrefillTP2DecodeTP1(t *testing.T) {
	r := newRig(t, rigConfig{newAgent: nativeAgent, preTP: 2, decTP: 1})
	pushOne(t, r, true, "tp21", "tp21", blocksFrom(1, 3), blocksFrom(30, 3), 48)
}

func TestNativePrefillTP1DecodeTP2BlockSizes(t *testing.T) {
	r := newRig(t, rigConfig{newAgent: nativeAgent, preTP: 1, decTP: 2, preBlock: 16, decBlock: 32})
	pushOne(t, r, true, "tp12", "tp12", blocksFrom(0, 5), blocksFrom(7, 3), 70)
}

func TestNativePrefixHitNotificationOnly(t *testing.T) {
	r := newRig(t, rigConfig{newAgent: nativeAgent})
	c, p := r.consumers[0], r.producers[0]
	require.NoError(t, c.Register("hit", Coordinates(r.pre), []int{}))
	_, err := p.RequestFinished("hit", blocksFrom(0, 2))
	require.NoError(t, err)
	require.NoError(t, await(t, c, 1)[0].Err)
	freedOnce(t, p, "hit")
}
