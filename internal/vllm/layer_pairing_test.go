package vllm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// pairedSample is the version-16 metadata of a rank of a three-layer
// model whose last layer is in group 1, its regions listed as vLLM sorts
// them, here out of the local order: layer 2 first.
func pairedSample() *AgentMetadata {
	return &AgentMetadata{
		EngineID: "p", AgentMetadata: []byte{1}, DeviceID: 0, NumBlocks: 4, BlockSize: 16,
		KVCachesBaseAddr: []uint64{0x3000, 0x1000, 0x2000}, BlockLens: []uint64{30, 10, 20}, BlockStrides: []uint64{30, 10, 20},
		KVCacheLayout: LayoutHND, AttnBackendName: "FLASH_ATTN", PhysicalBlocksPerLogical: 1, DCPSize: 1, PCPSize: 1,
		RegionGroupIDs: []int{1, 0, 0},
		RegionMembers:  [][]string{{"model.layers.2.self_attn.attn"}, {"model.layers.0.self_attn.attn"}, {"model.layers.1.self_attn.attn"}},
		LayerGroupIDs: []LayerGroup{{"model.layers.2.self_attn.attn", 1}, {"model.layers.0.self_attn.attn", 0},
			{"model.layers.1.self_attn.attn", 0}},
	}
}

var pairNames = []string{"model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn", "model.layers.2.self_attn.attn"}

func TestPairByLayerOrdersRegionsByLocalLayer(t *testing.T) {
	m := pairedSample()
	p, err := PairByLayer(m, pairNames, []int{0, 0, 1})
	require.NoError(t, err)
	require.Equal(t, []uint64{0x1000, 0x2000, 0x3000}, p.KVCachesBaseAddr)
	require.Equal(t, []uint64{10, 20, 30}, p.BlockLens)
	require.Equal(t, []uint64{10, 20, 30}, p.BlockStrides)
	require.Equal(t, []int{0, 0, 1}, p.RegionGroupIDs)
	require.Equal(t, [][]string{{pairNames[0]}, {pairNames[1]}, {pairNames[2]}}, p.RegionMembers)
	require.Equal(t, pairedSample(), m, "the input is not changed")
}

func TestPairByLayerRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(m *AgentMetadata)
		err    string
	}{
		{"no members", func(m *AgentMetadata) { m.RegionMembers = nil },
			`vllm: incompatible peer: engine "p" did not advertise the layers of its KV regions: region_members has 0 entries, kv_caches_base_addr 3`},
		{"empty region", func(m *AgentMetadata) { m.RegionMembers[1] = []string{} },
			`vllm: incompatible peer: engine "p": region_members[1] lists no layer`},
		{"unknown layer", func(m *AgentMetadata) { m.RegionMembers[0] = []string{"model.layers.2.mlp"} },
			`vllm: incompatible peer: engine "p" holds KV layer "model.layers.2.mlp" (region_members[0]), which has no counterpart here`},
		{"layer missing", func(m *AgentMetadata) {
			m.RegionMembers[0] = []string{pairNames[1]}
			m.RegionMembers[2] = []string{}
		}, `vllm: incompatible peer: engine "p": region_members[2] lists no layer`},
		{"layer twice", func(m *AgentMetadata) { m.RegionMembers[0] = []string{pairNames[2], pairNames[0]} },
			`vllm: unsupported: engine "p" holds KV layer "model.layers.0.self_attn.attn" in regions 0 and 1: gonixl pairs one region per layer`},
		{"other group", func(m *AgentMetadata) { m.LayerGroupIDs[0].Group = 0 },
			`vllm: incompatible peer: engine "p" puts KV layer "model.layers.2.self_attn.attn" in KV-cache group 0, this engine in group 1`},
		{"no group", func(m *AgentMetadata) { m.LayerGroupIDs = m.LayerGroupIDs[:2] },
			`vllm: incompatible peer: engine "p": layer_group_ids gives KV layer "model.layers.1.self_attn.attn" no group`},
	} {
		m := pairedSample()
		tc.mutate(m)
		_, err := PairByLayer(m, pairNames, []int{0, 0, 1})
		require.EqualError(t, err, tc.err, tc.name)
	}
	// A local layer the peer does not hold.
	_, err := PairByLayer(pairedSample(), append(pairNames[:3:3], "model.layers.3.self_attn.attn"), []int{0, 0, 1, 1})
	require.EqualError(t, err, `vllm: incompatible peer: engine "p" does not hold the KV layers ["model.layers.3.self_attn.attn"]`)
}

func TestLayerNames(t *testing.T) {
	names, err := LayerNames("", 3)
	require.NoError(t, err)
	require.Equal(t, pairNames, names)
	names, err = LayerNames("language_model.model.layers.%d.self_attn.attn", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"language_model.model.layers.0.self_attn.attn"}, names)
	for _, bad := range []string{"model.layers", "layers.%d.%d", "layers.%s", "100%% layers.%d"} {
		_, err := LayerNames(bad, 1)
		require.ErrorIs(t, err, ErrUnsupported, bad)
		require.ErrorContains(t, err, "want exactly one %d (the layer index)", bad)
	}
}
