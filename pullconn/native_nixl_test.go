//go:build nixl

package pullconn

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
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
// memory (ucx_error_handling_mode=none), progressed by the connectors'
// pollers (no NIXL progress thread).
func nativeAgent(t *testing.T, name string) nixl.Agent {
	a, err := nixl.New(t.Name()+"."+name, nixl.Config{})
	require.NoError(t, err)
	if err := a.CreateBackend("UCX", map[string]string{"ucx_error_handling_mode": "none"}); err != nil {
		a.Close()
		t.Fatalf("create UCX backend: %v", err)
	}
	return a
}

func TestNativeHappyPathBytesVerified(t *testing.T) {
	c := transferCase(t, clusterOpts{newAgent: nativeAgent}, 100)
	assert.Equal(t, uint64(1), c.cons[0].Stats().Transfers)
	assert.Equal(t, uint64(7*16*4*8*4), c.cons[0].Stats().Bytes)
}

func TestNativePrefillTP2DecodeTP1(t *testing.T) {
	c := transferCase(t, clusterOpts{newAgent: nativeAgent, prefill: side{2, 16}, decode: side{1, 16}}, 70)
	assert.Equal(t, uint64(2), c.cons[0].Stats().Transfers)
}

func TestNativePrefixHitNotificationOnly(t *testing.T) {
	c := newCluster(t, clusterOpts{newAgent: nativeAgent})
	p := c.finish("req-1", blocksFrom(0, 4))
	c.load("dreq-1", p, nil)
	require.NoError(t, c.result("dreq-1")[0].Err)
	assert.Equal(t, map[string]int{"req-1": 1}, c.freed(1)[0])
}
