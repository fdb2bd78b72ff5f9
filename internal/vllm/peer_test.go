package vllm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
)

// A prefill engine of 2 ranks publishes its layouts on a side channel as
// vLLM would; a decode engine fetches the ranks it reads and gets the same
// layouts back, through vLLM's bytes, and the clock offset of its lowest
// round trip. The wrong hash, the wrong engine and metadata gonixl cannot
// move are refused.
func TestFetchPeer(t *testing.T) {
	for v := OldestVersion; v <= NewestVersion; v++ {
		t.Run(fmt.Sprint(int(v)), func(t *testing.T) { testFetchPeer(t, v) })
	}
}

func testFetchPeer(t *testing.T, v Version) {
	w := Wire{Version: v}
	hash := CompatFactors{ConnectorVersion: v, VLLMVersion: "0.27.1", Model: "m", DType: "torch.bfloat16", AttnBackendName: "FLASH_ATTN",
		CacheDType: "auto", NumKVHeads: 8, HeadSize: 64, NumHiddenLayers: 3, HMAEnabled: true, TransferMode: TransferModePull}.Hash()
	s, err := ListenSide(DefaultSideHost, 0, SideOptions{Now: func() float64 { return 1000 }})
	require.NoError(t, err)
	defer s.Close()
	var layouts []descriptors.Layout
	for r := range 2 {
		l := packedLayout(t, model, r)
		l.Regions[0].Base += uint64(r) << 32 // each rank its own memory
		for i := range l.Regions {
			l.Regions[i].Base = l.Regions[0].Base + uint64(i)*l.RegionLen()
		}
		require.NoError(t, PublishRank(s, "prefill", hash, w, l, []byte{byte(r)}, "FLASH_ATTN", ""))
		layouts = append(layouts, l)
	}
	ctx := context.Background()
	opts := SideFetchOptions{Timeout: 2 * time.Second, Now: func() float64 { return 10 }}
	p, err := FetchPeer(ctx, "127.0.0.1", s.Port(), "prefill", hash, w, model, 2, []int{1, 0}, opts)
	require.NoError(t, err)
	require.Len(t, p.Ranks, 2)
	assert.Equal(t, layouts[1], p.Ranks[0].Layout)
	assert.Equal(t, layouts[0], p.Ranks[1].Layout)
	assert.Equal(t, []byte{1}, p.Ranks[0].AgentMetadata)
	assert.Equal(t, "FLASH_ATTN", p.Ranks[0].AttnBackend)
	assert.InDelta(t, 990, p.Offset, 1e-9, "the peer's clock reads 1000 when ours reads 10")

	_, err = FetchPeer(ctx, "127.0.0.1", s.Port(), "prefill", "00"+hash[2:], w, model, 2, []int{0}, opts)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.ErrorContains(t, err, `engine "prefill" rank 0: vllm: incompatible peer: compatibility hash mismatch`)
	_, err = FetchPeer(ctx, "127.0.0.1", s.Port(), "decode", hash, w, model, 2, []int{0}, opts)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.ErrorContains(t, err, `engine "decode" rank 0: the metadata names engine "prefill"`)
	other := model
	other.HeadDim = 32
	_, err = FetchPeer(ctx, "127.0.0.1", s.Port(), "prefill", hash, w, other, 2, []int{0}, opts)
	require.ErrorIs(t, err, ErrIncompatible)

	sep := model
	sep.KVPacked = false
	require.ErrorIs(t, PublishRank(s, "prefill", hash, w, packedLayout(t, sep, 0), nil, "FLASH_ATTN", ""), ErrUnsupported)
}
