package pullconn

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
)

// From connector version 15 a prefill in vLLM's protocol writes its
// registration generation (each rank's first payload moves it on, as
// vLLM's scheduler counts), and a decode that handshook at a lower
// generation forgets that handshake, unloads the agents' metadata and
// handshakes again before it reads, once per new generation; every byte
// arrives each time. Version 12 writes no generation.
func TestRegistrationGeneration(t *testing.T) {
	c := newCluster(t, clusterOpts{vllm: true, prefill: side{2, 16}, decode: side{1, 16}})
	pblocks, dblocks := blocksFrom(3, 4), blocksFrom(20, 4)
	rehandshakes := func() uint64 {
		v, _ := c.cons[0].Stats().Get("registration_rehandshakes")
		return v
	}
	c.fill(7, pblocks, 60)
	p := c.finish("req-1", pblocks)
	assert.Equal(t, 2, p.RemoteRegistrationGeneration, "each of the two ranks' first payloads")
	raw, _ := json.Marshal(p)
	assert.Contains(t, string(raw), `"remote_registration_generation":2`)
	c.load("dreq-1", p, dblocks)
	require.NoError(t, c.result("dreq-1")[0].Err)
	c.verify(7, dblocks, 0, 60)
	assert.Zero(t, rehandshakes())

	// Prefill says it registered anew: decode handshakes again, once.
	for i, gen := range []int{5, 5} {
		id := []string{"req-2", "req-3"}[i]
		c.fill(8+i, pblocks, 60)
		p := c.finish(id, pblocks)
		p.RemoteRegistrationGeneration = gen
		c.load("d"+id, p, dblocks)
		require.NoError(t, c.result("d" + id)[0].Err, id)
		c.verify(8+i, dblocks, 0, 60)
		assert.Equal(t, uint64(1), rehandshakes(), "after %s", id)
	}
}

func TestRegistrationGenerationNotInVersion12(t *testing.T) {
	c := newCluster(t, clusterOpts{vllm: true, prefill: side{1, 16}, decode: side{1, 16},
		decodeEngine:  func(cfg *connector.EngineConfig) { cfg.VLLM.ConnectorVersion = 12 },
		prefillEngine: func(cfg *connector.EngineConfig) { cfg.VLLM.ConnectorVersion = 12 }})
	pblocks := blocksFrom(3, 2)
	c.fill(1, pblocks, 20)
	p := c.finish("req-1", pblocks)
	raw, _ := json.Marshal(p)
	assert.NotContains(t, string(raw), "remote_registration_generation")
}
