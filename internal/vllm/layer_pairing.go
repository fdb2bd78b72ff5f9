package vllm

import (
	"fmt"
	"slices"

	"github.com/gonixl/gonixl/descriptors"
)

// Wire is what a rank speaks on vLLM's wire beside its compatibility hash:
// the connector version, and the vLLM names of the model's layers, which
// region_members carries from version 13 and by which regions pair from 16.
type Wire struct {
	Version Version
	// LayerNames names each layer of the model in gonixl's layer order
	// (a geometry's layers; with KV-cache groups, group after group, each
	// group's layers in order); nil names them by DefaultLayerNameFormat.
	LayerNames []string
}

// names returns w's names for a model of n layers.
func (w Wire) names(n int) ([]string, error) {
	if w.LayerNames == nil {
		return LayerNames(DefaultLayerNameFormat, n)
	}
	if len(w.LayerNames) != n {
		return nil, fmt.Errorf("%w: %d layer names for a model of %d layers", ErrUnsupported, len(w.LayerNames), n)
	}
	return w.LayerNames, nil
}

// geometryLayerGroups returns the KV-cache group of each layer of g, in
// gonixl's layer order.
func geometryLayerGroups(g descriptors.Geometry) []int {
	if g.Groups == nil || len(*g.Groups) == 0 {
		return make([]int, max(g.Layers, 0))
	}
	var out []int
	for gi, gg := range *g.Groups {
		for range max(gg.Layers, 0) {
			out = append(out, gi)
		}
	}
	return out
}

// PairByLayer returns m with its regions in the local order of the layers
// they hold, as vLLM pairs a peer's regions from version 16 on: through
// region_members, which must list each region's layers, every layer named
// being one of names (the local model's, one per layer of groups, in
// gonixl's layer order) and every local layer held by the peer. A region
// goes where its first local layer is, so that a peer listing its layers
// in another order (vLLM sorts them by name, layers.10 after layers.2)
// pairs as if listed in the local order. When the peer gives
// layer_group_ids, each layer's group must be its local one. The errors
// match ErrIncompatible (ErrUnsupported for a layer in several regions)
// and name the layer; m itself is not changed.
func PairByLayer(m *AgentMetadata, names []string, groups []int) (*AgentMetadata, error) {
	n := len(m.KVCachesBaseAddr)
	if len(m.RegionMembers) != n {
		return nil, incompatible("engine %q did not advertise the layers of its KV regions: region_members has %d entries, kv_caches_base_addr %d", m.EngineID, len(m.RegionMembers), n)
	}
	local := make(map[string]int, len(names))
	for i, name := range names {
		local[name] = i
	}
	peerGroup := make(map[string]int, len(m.LayerGroupIDs))
	for _, e := range m.LayerGroupIDs {
		peerGroup[e.Layer] = e.Group
	}
	held := make([]int, len(names)) // the peer's region of each local layer, +1
	first := make([]int, n)         // each region's first local layer
	for r, members := range m.RegionMembers {
		if len(members) == 0 {
			return nil, incompatible("engine %q: region_members[%d] lists no layer", m.EngineID, r)
		}
		first[r] = len(names)
		for _, name := range members {
			i, ok := local[name]
			switch {
			case !ok:
				return nil, incompatible("engine %q holds KV layer %q (region_members[%d]), which has no counterpart here", m.EngineID, name, r)
			case held[i] != 0:
				return nil, unsupported("engine %q holds KV layer %q in regions %d and %d: gonixl pairs one region per layer", m.EngineID, name, held[i]-1, r)
			}
			held[i] = r + 1
			first[r] = min(first[r], i)
			if len(m.LayerGroupIDs) == 0 {
				continue
			}
			switch pg, ok := peerGroup[name]; {
			case !ok:
				return nil, incompatible("engine %q: layer_group_ids gives KV layer %q no group", m.EngineID, name)
			case pg != groups[i]:
				return nil, incompatible("engine %q puts KV layer %q in KV-cache group %d, this engine in group %d", m.EngineID, name, pg, groups[i])
			}
		}
	}
	var missing []string
	for i, r := range held {
		if r == 0 {
			missing = append(missing, names[i])
		}
	}
	if len(missing) > 0 {
		return nil, incompatible("engine %q does not hold the KV layers %q", m.EngineID, missing)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return first[a] - first[b] })
	return selectRegions(m, order), nil
}

// selectRegions returns a copy of m holding its regions order, in that
// order.
func selectRegions(m *AgentMetadata, order []int) *AgentMetadata {
	out := *m
	out.KVCachesBaseAddr = pick(m.KVCachesBaseAddr, order)
	out.BlockLens = pick(m.BlockLens, order)
	out.BlockStrides = pick(m.BlockStrides, order)
	out.RegionNumBlocks = pick(m.RegionNumBlocks, order)
	out.RegionGroupIDs = pick(m.RegionGroupIDs, order)
	out.RegionNames = pick(m.RegionNames, order)
	out.RegionMemTypes = pick(m.RegionMemTypes, order)
	out.RegionMembers = pick(m.RegionMembers, order)
	return &out
}

// pick returns vs[order[0]], vs[order[1]], ...; nil for nil.
func pick[T any](vs []T, order []int) []T {
	if vs == nil {
		return nil
	}
	out := make([]T, len(order))
	for i, j := range order {
		out[i] = vs[j]
	}
	return out
}
