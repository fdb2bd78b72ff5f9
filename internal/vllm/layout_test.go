package vllm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// The model as both engines hold it; the peer's TP size, block count and
// block size are its own.
var model = descriptors.Geometry{Layers: 3, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 100, TPSize: 2, KVPacked: true}

func packedLayout(t *testing.T, g descriptors.Geometry, rank int) descriptors.Layout {
	t.Helper()
	l, err := g.Layout(nixl.VRAM, rank, nixl.Desc{Addr: 0x7f0000000000, Len: g.RankBytes(), DevID: 3})
	require.NoError(t, err)
	return l
}

// A rank's layout goes out as vLLM's metadata and comes back as the same
// layout, through the bytes.
func TestLayoutRoundTrip(t *testing.T) {
	peer := model
	peer.TPSize, peer.Blocks, peer.BlockSize = 4, 250, 32
	l := packedLayout(t, peer, 2)
	m, err := MetadataOf(l, "prefill-0", []byte{1, 2, 3}, "FLASH_ATTN", "")
	require.NoError(t, err)
	assert.Equal(t, LayoutLBHNC, m.KVCacheLayout, "by default the name a vLLM worker publishes")
	assert.Equal(t, []uint64{l.BlockLen(), l.BlockLen(), l.BlockLen()}, m.BlockLens)
	assert.Equal(t, 3, m.DeviceID)
	require.NoError(t, m.Validate())
	back, err := DecodeAgentMetadata(m.Encode(V12), V12)
	require.NoError(t, err)
	got, err := LayoutOf(back, model, 2, 4)
	require.NoError(t, err)
	assert.Equal(t, l, got)

	m.KVCacheLayout = LayoutLBHNC
	_, err = LayoutOf(m, model, 2, 4)
	assert.NoError(t, err, "LBHNC is the same head-major packed layout")
}

// What gonixl cannot move is refused, naming the field and its value; the
// metadata of another model is refused as invalid.
func TestLayoutRefusals(t *testing.T) {
	l := packedLayout(t, model, 0)
	good := func() *AgentMetadata {
		m, err := MetadataOf(l, "p", []byte{1}, "FLASH_ATTN", "")
		require.NoError(t, err)
		return m
	}
	for want, edit := range map[string]func(*AgentMetadata){
		"vllm: unsupported: dcp_size is 2: only 1 is supported":                                                               func(m *AgentMetadata) { m.DCPSize = 2 },
		"vllm: unsupported: pcp_size is 2: only 1 is supported":                                                               func(m *AgentMetadata) { m.PCPSize = 2 },
		"vllm: unsupported: physical_blocks_per_logical_kv_block is 2: only 1 is supported for a model of one KV-cache group": func(m *AgentMetadata) { m.PhysicalBlocksPerLogical = 2 },
		`vllm: unsupported: kv_cache_layout is "BHLNC": only the packed "LBHNC" ("HND", head-major) and "LBNHC" ("NHD", token-major) are supported`: func(m *AgentMetadata) {
			m.KVCacheLayout = "BHLNC"
		},
		"vllm: unsupported: block_strides[1] is 32768, block_lens[1] 16384: only blocks back to back are supported": func(m *AgentMetadata) {
			m.BlockStrides[1] = 2 * m.BlockLens[1]
		},
		`vllm: unsupported: region_mem_types[1] is "DRAM", region_mem_types[0] "VRAM": mixed memory is not supported`: func(m *AgentMetadata) {
			m.RegionMemTypes[1] = MemTypeDRAM
		},
		"vllm: unsupported: region_num_blocks[0] is 7, num_blocks 100: only regions of one block count are supported": func(m *AgentMetadata) { m.RegionNumBlocks[0] = 7 },
	} {
		m := good()
		edit(m)
		_, err := LayoutOf(m, model, 0, 2)
		require.ErrorIs(t, err, ErrUnsupported, want)
		assert.EqualError(t, err, want)
	}
	// A grouped peer (several KV-cache groups, SSM state) is another model
	// than one without groups (TestGroupLayoutRefusals has the grouped one).
	for want, edit := range map[string]func(*AgentMetadata){
		`vllm: incompatible peer: engine "p" rank 0: ssm_sizes is [1 2]: the peer holds SSM (Mamba) state, the local model's geometry has no KV-cache groups (descriptors.Geometry.Groups)`: func(m *AgentMetadata) {
			m.SSMSizes = [2]uint64{1, 2}
		},
		`vllm: incompatible peer: engine "p" rank 0: region_group_ids[2] is 1, region_group_ids[0] 0: the peer has several KV-cache groups, the local model's geometry one (descriptors.Geometry.Groups)`: func(m *AgentMetadata) {
			m.RegionGroupIDs[2] = 1
		},
	} {
		m := good()
		edit(m)
		_, err := LayoutOf(m, model, 0, 2)
		require.ErrorIs(t, err, ErrIncompatible, want)
		assert.EqualError(t, err, want)
	}
	// The token-major layout, under either name.
	for _, name := range []string{LayoutNHD, LayoutLBNHC} {
		m := good()
		m.KVCacheLayout = name
		got, err := LayoutOf(m, model, 0, 2)
		require.NoError(t, err)
		assert.Equal(t, descriptors.OrderNHD, got.Order)
		nhd := l
		nhd.Order = descriptors.OrderNHD
		assert.Equal(t, nhd, got)
		back, err := MetadataOf(got, "p", []byte{1}, "FLASH_ATTN", map[string]string{LayoutNHD: LayoutHND, LayoutLBNHC: LayoutLBHNC}[name])
		require.NoError(t, err)
		assert.Equal(t, name, back.KVCacheLayout)
	}

	m := good()
	other := model
	other.HeadDim = 32
	_, err := LayoutOf(m, other, 0, 2)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.ErrorContains(t, err, `engine "p" rank 0: block_lens[0] is 16384, the model's geometry gives 8192 (4 heads x 16 tokens x 128 bytes)`)

	m = good()
	m.KVCachesBaseAddr = m.KVCachesBaseAddr[:2]
	_, err = LayoutOf(m, model, 0, 2)
	require.ErrorIs(t, err, descriptors.ErrInvalid)

	sep := model
	sep.KVPacked = false
	_, err = MetadataOf(packedLayout(t, sep, 0), "p", nil, "FLASH_ATTN", "")
	require.ErrorIs(t, err, ErrUnsupported)
}
