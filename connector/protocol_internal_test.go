package connector

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
)

// The compatibility hash is made of the engine's configuration as vLLM
// makes it of its own, the speculative config included: the digests of the
// worked examples in docs/vllm.md (computed with CPython's json and
// hashlib): pull, push, and pull with an EAGLE-3 draft.
func TestVLLMHashOfTheEngineConfig(t *testing.T) {
	cfg := EngineConfig{Model: "Qwen/Qwen3-0.6B",
		Geometry: descriptors.Geometry{Layers: 28, KVHeads: 8, HeadDim: 128, DType: "bfloat16", ElemBytes: 2, BlockSize: 16, Blocks: 8, TPSize: 1, KVPacked: true},
		VLLM:     VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}}
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
