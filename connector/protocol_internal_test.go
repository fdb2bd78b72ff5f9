package connector

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/vllm"
)

// The compatibility hash is made of the engine's configuration as vLLM
// makes it of its own, the speculative config included: the digests of the
// worked examples in docs/vllm.md (computed with CPython's json and
// hashlib): pull, push, and pull with an EAGLE-3 draft.
func TestVLLMHashOfTheEngineConfig(t *testing.T) {
	cfg := EngineConfig{Model: "Qwen/Qwen3-0.6B",
		Geometry: descriptors.Geometry{Layers: 28, KVHeads: 8, HeadDim: 128, DType: "bfloat16", ElemBytes: 2, BlockSize: 16, Blocks: 8, TPSize: 1, KVPacked: true},
		VLLM:     VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN", ConnectorVersion: 12}}
	conn := engine.Connector{Name: "pullconn", Mode: "pull", ErrInvalid: errors.New("invalid")}
	got, err := vllmConfig(cfg, conn)
	require.NoError(t, err)
	require.Equal(t, "407674cde2de5934d995c8dac06fb687b73b3d66a25e6fdbd9d52d237c3b50a5", got.Hash)

	push, err := vllmConfig(cfg, engine.Connector{Name: "pushconn", Mode: "push", ErrInvalid: conn.ErrInvalid})
	require.NoError(t, err)
	require.Equal(t, "24d36b0ac598b5dcab49b1c291d31bceb4652b5105c35a85083091f99dd88190", push.Hash, "the transfer mode is a factor")

	cfg.VLLM.Speculative = &VLLMSpeculative{Method: "eagle3", Model: "org/draft", KVCacheDType: "auto", AuxiliaryLayerIDs: []int{1, 13, 24}}
	got, err = vllmConfig(cfg, conn)
	require.NoError(t, err)
	require.Equal(t, "3d93461c87fee2e7fb94a04e1f7955db7bc1eefdd4a352283e7177cb4c91f245", got.Hash)
}

// The connector version is the one asked, else the one of the release
// VLLM.Version names, else the newest release's (16); it is a factor of
// the hash (digests from CPython's json and hashlib), and from 16 the
// speculative factor has no parallel_drafting.
func TestVLLMConnectorVersionOfTheEngineConfig(t *testing.T) {
	cfg := EngineConfig{Model: "Qwen/Qwen3-0.6B",
		Geometry: descriptors.Geometry{Layers: 28, KVHeads: 8, HeadDim: 128, DType: "bfloat16", ElemBytes: 2, BlockSize: 16, Blocks: 8, TPSize: 1, KVPacked: true},
		VLLM:     VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}}
	conn := engine.Connector{Name: "pullconn", Mode: "pull", ErrInvalid: errors.New("invalid")}
	got, err := vllmConfig(cfg, conn)
	require.NoError(t, err)
	require.Equal(t, vllm.V16, got.Wire.Version, "an unlisted release speaks the newest release's version")
	require.Equal(t, "9b49fd38b60085e91f1d2ab0e0d6cb4d5a2f97f987b5be0dfdc782981db8a11d", got.Hash)
	require.Len(t, got.Wire.LayerNames, 28)
	require.Equal(t, "model.layers.27.self_attn.attn", got.Wire.LayerNames[27])

	cfg.VLLM.Speculative = &VLLMSpeculative{Method: "eagle3", Model: "org/draft", KVCacheDType: "auto", AuxiliaryLayerIDs: []int{1, 13, 24}, ParallelDrafting: true}
	got, err = vllmConfig(cfg, conn)
	require.NoError(t, err)
	require.Equal(t, "39e48214387b82486eb929940acc9531db60fef2422939fba4910d2cb52b258a", got.Hash, "parallel_drafting is not hashed at 16")
	cfg.VLLM.Speculative = nil

	cfg.VLLM.Version = "0.33.0"
	got, err = vllmConfig(cfg, conn)
	require.NoError(t, err)
	require.Equal(t, vllm.V15, got.Wire.Version)
	require.Equal(t, "cde24c489ad71bfdbccb1b829551f03719b0fe359a22fe635ec9986a6f36e549", got.Hash)

	cfg.VLLM.LayerNameFormat = "language_model.model.layers.%d.self_attn.attn"
	got, err = vllmConfig(cfg, conn)
	require.NoError(t, err)
	require.Equal(t, "language_model.model.layers.3.self_attn.attn", got.Wire.LayerNames[3])

	for _, tc := range []struct {
		mutate func(v *VLLM)
		err    string
	}{
		{func(v *VLLM) { v.ConnectorVersion = 11 }, "invalid: EngineConfig.VLLM.ConnectorVersion: vllm: unsupported: NIXL connector version 11: gonixl speaks 12 to 16"},
		{func(v *VLLM) { v.ConnectorVersion = 17 }, "invalid: EngineConfig.VLLM.ConnectorVersion: vllm: unsupported: NIXL connector version 17: gonixl speaks 12 to 16"},
		{func(v *VLLM) { v.LayerNameFormat = "layers.%s" }, `invalid: EngineConfig.VLLM.LayerNameFormat: vllm: unsupported: layer name format "layers.%s": want exactly one %d (the layer index), like "model.layers.%d.self_attn.attn"`},
		{func(v *VLLM) { v.LayerNames = []string{"a"} }, "invalid: EngineConfig.VLLM.LayerNames and LayerNameFormat are both set: give one"},
		{func(v *VLLM) { v.LayerNameFormat, v.LayerNames = "", []string{"a"} }, "invalid: EngineConfig.VLLM.LayerNames has 1 names, the model 28 layers (Geometry.Layers)"},
		{func(v *VLLM) {
			v.LayerNameFormat, v.LayerNames = "", make([]string, 28)
			for i := range v.LayerNames {
				v.LayerNames[i] = fmt.Sprint(i % 27)
			}
		}, `invalid: EngineConfig.VLLM.LayerNames[0] and [27] are both "0"`},
	} {
		c := cfg
		tc.mutate(&c.VLLM)
		_, err := vllmConfig(c, conn)
		require.EqualError(t, err, tc.err)
		require.ErrorIs(t, err, conn.ErrInvalid)
	}
}
