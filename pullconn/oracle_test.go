package pullconn

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/oracle"
)

// The kv_transfer_params of a pull prefill, against vLLM's own code
// (internal/oracle): what a gonixl prefill in vLLM's protocol returns is
// what vLLM's decode builds its receive from (NixlConnectorMetadata's
// add_new_req_to_recv), and what vLLM's prefill returns
// (NixlPullConnectorScheduler.request_finished), with its null expiry,
// registration generation, dcp_size and transfer_mode, is what a gonixl
// decode loads from: every byte arrives.
func TestOracleParams(t *testing.T) {
	c := newCluster(t, clusterOpts{vllm: true, prefill: side{1, 16}, decode: side{2, 16}})
	pblocks, dblocks := blocksFrom(3, 4), blocksFrom(20, 4)
	c.fill(5, pblocks, 60)
	ours := c.finish("req-1", pblocks)

	// gonixl's Params, read by vLLM's decode.
	raw, err := json.Marshal(ours)
	require.NoError(t, err)
	in, _ := json.Marshal(map[string]any{"request_id": "dreq-1", "local_block_ids": [][]int{dblocks}, "params": json.RawMessage(raw)})
	lines := oracle.Run(t, string(in)+"\n", "recv-meta")
	var meta struct {
		Error  string
		TPSize int `json:"tp_size"`
		Remote struct {
			BlockIDs  [][]int `json:"block_ids"`
			EngineID  string  `json:"engine_id"`
			RequestID string  `json:"request_id"`
			Host      string
			Port      int
			NumTokens *int `json:"num_tokens"`
			Gen       int  `json:"registration_generation"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &meta))
	require.Empty(t, meta.Error)
	assert.Equal(t, [][]int{pblocks}, meta.Remote.BlockIDs, "a list per KV-cache group, as vLLM indexes it")
	assert.Equal(t, ours.RemoteEngineID, meta.Remote.EngineID)
	assert.Equal(t, "req-1", meta.Remote.RequestID)
	assert.Equal(t, ours.RemoteHost, meta.Remote.Host)
	assert.Equal(t, ours.RemotePort, meta.Remote.Port)
	assert.Equal(t, 1, meta.TPSize)
	assert.Equal(t, 1, ours.RemoteRegistrationGeneration, "the prefill rank's first payload")
	assert.Equal(t, ours.RemoteRegistrationGeneration, meta.Remote.Gen, "vLLM's decode reads the generation")

	// vLLM's Params for the same finished request, loaded by gonixl's
	// decode.
	req, _ := json.Marshal(map[string]any{"request_id": "req-1", "engine_id": ours.RemoteEngineID, "host": ours.RemoteHost,
		"port": ours.RemotePort, "tp_size": 1, "blocks": [][]int{pblocks}, "num_tokens": 60})
	lines = oracle.Run(t, string(req), "pull-params")
	var theirs struct {
		DelayFree bool            `json:"delay_free"`
		Params    json.RawMessage `json:"params"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &theirs))
	require.True(t, theirs.DelayFree, "vLLM's prefill holds the blocks for decode")
	require.True(t, strings.Contains(string(theirs.Params), `"remote_blocks_expiry_time": null`), "vLLM 0.34's prefill gives no deadline: %s", theirs.Params)
	var p Params
	require.NoError(t, json.Unmarshal(theirs.Params, &p))
	c.load("dreq-1", p, dblocks)
	for i, r := range c.result("dreq-1") {
		require.NoError(t, r.Err, "decode rank %d", i)
	}
	c.verify(5, dblocks, 0, 60)
}
