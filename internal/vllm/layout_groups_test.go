package vllm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/nixl"
)

// groupLayout returns rank rank's packed layout of shape at TP tp.
func groupLayout(t *testing.T, shape string, tp, bs, rank int) (descriptors.Geometry, descriptors.Layout) {
	t.Helper()
	g := grouptest.Geometry(shape, tp, bs)
	g.KVPacked = true
	l, err := g.Layout(nixl.VRAM, rank, nixl.Desc{Addr: 0x7f0000000000, Len: g.RankBytes(), DevID: 1})
	require.NoError(t, err)
	return g, l
}

// A grouped rank's layout goes out as vLLM's metadata (region_group_ids,
// per-region block_lens, ssm_sizes) and comes back as the same layout,
// through the bytes, read with the local model's geometry at another TP
// size.
func TestGroupLayoutRoundTrip(t *testing.T) {
	for _, shape := range grouptest.Shapes {
		for _, tc := range []struct{ localTP, peerTP, rank int }{{2, 2, 1}, {1, 2, 1}, {2, 1, 0}} {
			t.Run(fmt.Sprintf("%s/local%d_peer%d", shape, tc.localTP, tc.peerTP), func(t *testing.T) {
				local := grouptest.Geometry(shape, tc.localTP, 16)
				local.KVPacked = true
				_, l := groupLayout(t, shape, tc.peerTP, 8, tc.rank)
				for _, order := range []string{"", descriptors.OrderNHD} {
					l.Order = order
					m, err := MetadataOf(l, "prefill-0", []byte{1}, "FLASH_ATTN", LayoutLBHNC)
					require.NoError(t, err)
					require.NoError(t, m.Validate())
					assert.Equal(t, map[string]string{"": LayoutLBHNC, descriptors.OrderNHD: LayoutLBNHC}[order], m.KVCacheLayout)
					assert.Equal(t, 1, m.PhysicalBlocksPerLogical)
					for i := range l.Regions {
						assert.Equal(t, l.BlockLenOf(i), m.BlockLens[i], "block_lens[%d]", i)
					}
					switch shape {
					case "swa":
						assert.Equal(t, []int{0, 1}, m.RegionGroupIDs)
						assert.Equal(t, [2]uint64{}, m.SSMSizes)
					case "hybrid":
						assert.Equal(t, []int{0, 1, 1}, m.RegionGroupIDs)
						// Conv 24+8+8 and state 32 bytes over the model, per rank.
						assert.Equal(t, [2]uint64{uint64(40 / tc.peerTP), uint64(32 / tc.peerTP)}, m.SSMSizes)
					}
					back, err := DecodeAgentMetadata(m.Encode(V12), V12)
					require.NoError(t, err)
					got, err := LayoutOf(back, local, tc.rank, tc.peerTP)
					require.NoError(t, err)
					assert.Equal(t, l, got)
				}
			})
		}
	}
}

// vLLM's hybrid manager shares one tensor between a layer of each group:
// such a region is -1 in region_group_ids and belongs to every group, the
// SSM state page padded to the attention page.
func TestGroupLayoutSharedRegions(t *testing.T) {
	g := grouptest.Geometry("swa", 2, 16)
	g.KVPacked = true
	// 2 KV heads over TP 2: 1 head x 16 tokens x 16 bytes (K and V) = 256
	// per block.
	m := &AgentMetadata{EngineID: "p", KVCachesBaseAddr: []uint64{0x10000}, NumBlocks: 32, BlockLens: []uint64{256}, BlockStrides: []uint64{256},
		KVCacheLayout: LayoutLBHNC, BlockSize: 16, PhysicalBlocksPerLogical: 1, DCPSize: 1, PCPSize: 1, RegionGroupIDs: []int{SharedRegionGroupID}}
	l, err := LayoutOf(m, g, 0, 2)
	require.NoError(t, err, "the full and the sliding-window layer share one tensor")
	assert.Equal(t, []descriptors.Group{{Kind: descriptors.KindFull, Regions: []int{0}}, {Kind: descriptors.KindSlidingWindow, Window: 24, Regions: []int{0}}}, l.Groups)
	m.KVCachesBaseAddr, m.BlockLens, m.BlockStrides, m.RegionGroupIDs = []uint64{0x10000, 0x20000}, []uint64{256, 256}, []uint64{256, 256}, []int{-1, 0}
	_, err = LayoutOf(m, g, 0, 2)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.ErrorContains(t, err, "region_group_ids give Groups[0] (full) 2 regions, the model's geometry 1 layers")

	// One full and one sliding-window layer on two shared tensors: each
	// group names both.
	m.KVCachesBaseAddr, m.BlockLens, m.BlockStrides, m.RegionGroupIDs = []uint64{0x10000, 0x20000}, []uint64{256, 256}, []uint64{256, 256}, []int{-1, -1}
	g.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 2}, {Kind: descriptors.KindSlidingWindow, Layers: 2, Window: 24}}
	g.Layers = 4
	l, err = LayoutOf(m, g, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, []descriptors.Group{{Kind: descriptors.KindFull, Regions: []int{0, 1}}, {Kind: descriptors.KindSlidingWindow, Window: 24, Regions: []int{0, 1}}}, l.Groups)
	back, err := MetadataOf(l, "p", nil, "", LayoutLBHNC)
	require.NoError(t, err)
	assert.Equal(t, []int{-1, -1}, back.RegionGroupIDs)

	// A hybrid whose attention and Mamba layers share tensors, with 2
	// physical blocks per logical one: the state page (block_lens x 2)
	// pads the conv (20) and state (16) bytes.
	h := grouptest.Geometry("hybrid", 2, 16)
	h.KVPacked = true
	h.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 2}, {Kind: descriptors.KindSSM, Layers: 2, Conv: []int{24, 8, 8}, State: 32}}
	h.Layers = 4
	m.PhysicalBlocksPerLogical, m.SSMSizes = 2, [2]uint64{20, 16}
	l, err = LayoutOf(m, h, 1, 2)
	require.NoError(t, err)
	require.Equal(t, &descriptors.SSMState{Conv: []int{12, 4, 4}, State: 16, Page: 512}, l.Groups[1].SSM)
	assert.Equal(t, 2, l.Groups[0].PhysicalPerLogical)
	back, err = MetadataOf(l, "p", nil, "", LayoutLBHNC)
	require.NoError(t, err)
	assert.Equal(t, m.BlockLens, back.BlockLens)
	assert.Equal(t, m.SSMSizes, back.SSMSizes)
	assert.Equal(t, 2, back.PhysicalBlocksPerLogical)
	assert.Equal(t, []int{-1, -1}, back.RegionGroupIDs)
}

// Grouped metadata that disagrees with the local model is refused, naming
// the field and both values.
func TestGroupLayoutRefusals(t *testing.T) {
	g, l := groupLayout(t, "hybrid", 2, 16, 0)
	good := func() *AgentMetadata {
		m, err := MetadataOf(l, "p", []byte{1}, "FLASH_ATTN", "")
		require.NoError(t, err)
		return m
	}
	for want, edit := range map[string]func(*AgentMetadata){
		"ssm_sizes is [20 17], Groups[1] (ssm) of the model's geometry gives [20 16] at TP size 2 (conv parts [12 4 4], state 16)":  func(m *AgentMetadata) { m.SSMSizes[1] = 17 },
		"region_group_ids[2] is 2: the model's geometry has 2 KV-cache groups":                                                      func(m *AgentMetadata) { m.RegionGroupIDs[2] = 2 },
		"region_group_ids give Groups[0] (full) 2 regions, the model's geometry 1 layers (descriptors.Geometry.Groups)":             func(m *AgentMetadata) { m.RegionGroupIDs[1] = 0 },
		"block_lens[0] is 64, Groups[0] (full) of the model's geometry gives 256 (1 heads x 16 tokens x 16 bytes)":                  func(m *AgentMetadata) { m.BlockLens[0], m.BlockStrides[0] = 64, 64 },
		"block_lens[1] is 30: times physical_blocks_per_logical_kv_block 1, an SSM page of 30 bytes, below ssm_sizes' 36":           func(m *AgentMetadata) { m.BlockLens[1], m.BlockStrides[1] = 30, 30 },
		"region_group_ids is None and the metadata has 2 regions, the model's geometry 3: the regions' KV-cache groups are unknown": func(m *AgentMetadata) { m.RegionGroupIDs = nil; m.trim(2) },
	} {
		m := good()
		edit(m)
		_, err := LayoutOf(m, g, 0, 2)
		require.ErrorIs(t, err, ErrIncompatible, want)
		assert.EqualError(t, err, `vllm: engine "p" rank 0: vllm: incompatible peer: `+want)
	}
	m := good()
	m.RegionGroupIDs = nil
	got, err := LayoutOf(m, g, 0, 2)
	require.NoError(t, err, "region_group_ids None: the model's own regions")
	assert.Equal(t, l, got)

	// The local model without groups refuses a grouped peer.
	flat := model
	m = good()
	m.SSMSizes = [2]uint64{}
	_, err = LayoutOf(m, flat, 0, 2)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.ErrorContains(t, err, "region_group_ids[1] is 1, region_group_ids[0] 0: the peer has several KV-cache groups")
	_, err = LayoutOf(good(), flat, 0, 2)
	assert.ErrorContains(t, err, "ssm_sizes is [20 16]: the peer holds SSM (Mamba) state")

	// What vLLM's metadata cannot say is refused when the rank publishes.
	odd := l
	odd.Groups = append([]descriptors.Group(nil), l.Groups...)
	odd.Groups[0].PhysicalPerLogical = 2
	_, err = MetadataOf(odd, "p", nil, "", "")
	require.ErrorIs(t, err, ErrUnsupported)
	assert.ErrorContains(t, err, "physical_blocks_per_logical_kv_block: Groups[1] has 1 physical blocks per logical block, Groups[0] 2")
	_, err = MetadataOf(l, "p", nil, "", LayoutLBNHC)
	assert.ErrorContains(t, err, `kv_cache_layout "LBNHC" names token-major (NHD) blocks, and the rank's layout is head-major`)
}

// trim keeps the first n regions of m.
func (m *AgentMetadata) trim(n int) {
	m.KVCachesBaseAddr, m.BlockLens, m.BlockStrides = m.KVCachesBaseAddr[:n], m.BlockLens[:n], m.BlockStrides[:n]
	m.RegionNumBlocks, m.RegionMemTypes = m.RegionNumBlocks[:n], m.RegionMemTypes[:n]
	if m.RegionGroupIDs != nil {
		m.RegionGroupIDs = m.RegionGroupIDs[:n]
	}
}

// A Mamba hybrid moves the prompt less its last token in vLLM's protocol;
// other models move it whole.
func TestTransferTokens(t *testing.T) {
	_, hybrid := groupLayout(t, "hybrid", 1, 16, 0)
	_, swa := groupLayout(t, "swa", 1, 16, 0)
	plain := packedLayout(t, model, 0)
	for _, tc := range []struct {
		l          descriptors.Layout
		prompt, to int
	}{{hybrid, 70, 69}, {hybrid, 2, 1}, {hybrid, 1, 1}, {hybrid, 0, 0}, {swa, 70, 70}, {plain, 70, 70}} {
		assert.Equal(t, tc.to, TransferTokens(&tc.l, tc.prompt), "%d groups, prompt %d", len(tc.l.Groups), tc.prompt)
	}
}
