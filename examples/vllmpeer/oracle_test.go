package vllmpeer_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/vllmpeer"
	"github.com/gonixl/gonixl/internal/oracle"
)

// The peer, written from docs/vllm.md's facts, checked against vLLM's own
// code (internal/oracle, vLLM 0.34.0): its hash (at the peer's connector
// version), and the kv_transfer_params of its pull prefill, key for key
// and value for value, but for the keys vLLM added after the peer's
// version.
func TestPeerAgainstVLLMOracle(t *testing.T) {
	fab := newFabric(t)
	pre := newPeer(t, fab, "prefill-0", 2, vllmpeer.ModePull)

	f := pre.Factors()
	in, _ := json.Marshal(map[string]any{"vllm_version": f.VLLMVersion, "connector_version": vllmpeer.ConnectorVersion,
		"model": f.Model, "dtype": f.DType, "num_kv_heads": f.NumKVHeads, "head_size": f.HeadSize,
		"num_hidden_layers": f.NumHiddenLayers, "attn_backend_name": f.AttnBackendName, "cache_dtype": f.CacheDType,
		"is_hma_enabled": f.HMAEnabled, "transfer_mode": f.TransferMode})
	lines := oracle.Run(t, string(in)+"\n", "hash")
	var h struct{ Hash string }
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &h))
	assert.Equal(t, h.Hash, pre.Hash(), "vLLM's hash of the peer's factors")

	_, toks := prompt(40)
	ours, err := pre.Prefill("req-1", toks, []int{3, 4, 5})
	require.NoError(t, err)
	req, _ := json.Marshal(map[string]any{"request_id": "req-1", "engine_id": ours.RemoteEngineID, "host": ours.RemoteHost,
		"port": ours.RemotePort, "tp_size": 2, "blocks": [][]int{{3, 4, 5}}, "num_tokens": 40})
	lines = oracle.Run(t, string(req), "pull-params")
	var theirs struct {
		Params map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &theirs))
	var mine map[string]any
	require.NoError(t, json.Unmarshal(ours.JSON(), &mine))
	// Added by vLLM after connector version 12 (nixl/metadata.py's
	// history: 15, remote_registration_generation).
	newer := map[string]any{"remote_registration_generation": float64(0)}
	for k, v := range newer {
		assert.Equal(t, v, theirs.Params[k], k)
		delete(theirs.Params, k)
	}
	assert.Equal(t, theirs.Params, mine)
}
