package vllm

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJSONSortsAndSeparatesAsPython(t *testing.T) {
	var b strings.Builder
	writeJSON(&b, jsonObject{{"c", []int{1, -2}}, {"a", jsonObject{}}, {"b", []int{}}, {"d", []int(nil)}})
	require.Equal(t, `{"a": {}, "b": [], "c": [1, -2], "d": null}`, b.String())
}

func TestHashShape(t *testing.T) {
	f := CompatFactors{ConnectorVersion: V12, VLLMVersion: "dev", Model: "m", DType: "torch.float16", AttnBackendName: "FLASHINFER",
		CacheDType: "fp8", NumKVHeads: 1, HeadSize: 64, NumHiddenLayers: 2, TransferMode: TransferModePush}
	h := f.Hash()
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{64}$`), h)
	require.Contains(t, f.JSON(), `"nixl_connector_version": 12`)
	require.Contains(t, f.JSON(), `"speculative_config": null`)
	require.NotContains(t, f.JSON(), "cross_layers_blocks", "version 12 has no such factor")

	rev := "main"
	f.SpeculativeConfig = &SpeculativeConfig{Method: "eagle", Model: "d", Revision: &rev, AuxiliaryLayerIDs: []int{}}
	require.Contains(t, f.JSON(), `"speculative_config": {"auxiliary_layer_ids": [], "code_revision": null, "kv_cache_dtype": "", "method": "eagle", "model": "d", "parallel_drafting": false, "revision": "main"}`)
	require.NotEqual(t, h, f.Hash())

	// Every factor changes the hash.
	base := CompatFactors{ConnectorVersion: V12, VLLMVersion: "0.27.1", Model: "m", DType: "d", AttnBackendName: "a", CacheDType: "c",
		NumKVHeads: 1, HeadSize: 2, NumHiddenLayers: 3, TransferMode: TransferModePull}
	seen := map[string]bool{base.Hash(): true}
	for _, mutate := range []func(*CompatFactors){
		func(f *CompatFactors) { f.VLLMVersion = "0.27.2" },
		func(f *CompatFactors) { f.Model = "n" },
		func(f *CompatFactors) { f.DType = "e" },
		func(f *CompatFactors) { f.AttnBackendName = "b" },
		func(f *CompatFactors) { f.CacheDType = "auto" },
		func(f *CompatFactors) { f.NumKVHeads = 8 },
		func(f *CompatFactors) { f.HeadSize = 128 },
		func(f *CompatFactors) { f.NumHiddenLayers = 4 },
		func(f *CompatFactors) { f.HMAEnabled = true },
		func(f *CompatFactors) { f.SpeculativeConfig = &SpeculativeConfig{} },
		func(f *CompatFactors) { f.TransferMode = TransferModePush },
		func(f *CompatFactors) { f.ConnectorVersion = V16 },
	} {
		g := base
		mutate(&g)
		require.False(t, seen[g.Hash()], g.JSON())
		seen[g.Hash()] = true
	}
}

// From version 16 the speculative factor has no parallel_drafting
// (nixl/metadata.py @ vllm 0.33.0 hashes it, @ 0.34.0 not): two configs
// that differ only there hash alike at 16 and apart at 15.
func TestHashSpeculativeFactorsByVersion(t *testing.T) {
	spec := func(parallel bool) *SpeculativeConfig {
		return &SpeculativeConfig{Method: "eagle3", Model: "d", KVCacheDType: "auto", ParallelDrafting: parallel}
	}
	for v, want := range map[Version]string{
		V15: `"speculative_config": {"auxiliary_layer_ids": null, "code_revision": null, "kv_cache_dtype": "auto", "method": "eagle3", "model": "d", "parallel_drafting": true, "revision": null}`,
		V16: `"speculative_config": {"auxiliary_layer_ids": null, "code_revision": null, "kv_cache_dtype": "auto", "method": "eagle3", "model": "d", "revision": null}`,
	} {
		on := CompatFactors{ConnectorVersion: v, SpeculativeConfig: spec(true)}
		off := CompatFactors{ConnectorVersion: v, SpeculativeConfig: spec(false)}
		require.Contains(t, on.JSON(), want, "version %d", v)
		require.Contains(t, on.JSON(), fmt.Sprintf(`"nixl_connector_version": %d`, v))
		require.Equal(t, v >= V16, on.Hash() == off.Hash(), "version %d", v)
	}
}
