package vllm

import (
	"fmt"
	"strings"

	"github.com/gonixl/gonixl/descriptors"
)

// DefaultLayerNameFormat formats the vLLM name of a rank's layer from its
// index: the attention layer of a Llama-, Qwen2- or Qwen3-style model,
// whose decoder layers make_layers names "model.layers.<i>" and whose
// attention module is "self_attn.attn" under it (models/utils.py,
// llama.py, qwen2.py, qwen3.py @ vllm 0.34.0).
const DefaultLayerNameFormat = "model.layers.%d.self_attn.attn"

// LayerNames returns the vLLM name of each of n layers by format, which
// holds one %d verb for the layer index (DefaultLayerNameFormat when
// empty).
func LayerNames(format string, n int) ([]string, error) {
	if format == "" {
		format = DefaultLayerNameFormat
	}
	if strings.Count(format, "%") != 1 || !strings.Contains(format, "%d") {
		return nil, fmt.Errorf("%w: layer name format %q: want exactly one %%d (the layer index), like %q", ErrUnsupported, format, DefaultLayerNameFormat)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf(format, i)
	}
	return names, nil
}

// layerRegions returns, for each layer of l in gonixl's layer order, its
// region and its KV-cache group: a layout without groups has one region
// per layer, in order, all of group 0; a grouped layout's layers are its
// groups' regions, group after group (descriptors.Geometry.Groups' order),
// so a region several groups share is the region of a layer of each.
func layerRegions(l *descriptors.Layout) (region, group []int) {
	if len(l.Groups) == 0 {
		region = make([]int, len(l.Regions))
		group = make([]int, len(l.Regions))
		for i := range region {
			region[i] = i
		}
		return region, group
	}
	for gi, g := range l.Groups {
		for _, r := range g.Regions {
			region = append(region, r)
			group = append(group, gi)
		}
	}
	return region, group
}

// setMembers fills m's region_members and, at v16, layer_group_ids from
// the layers of l, named by names (one per layer, in layerRegions' order):
// each region lists its layers in layer order, and each layer's group is
// listed once, in region_members' order, as vLLM's worker builds the dict.
func setMembers(m *AgentMetadata, l *descriptors.Layout, names []string, v Version) error {
	region, group := layerRegions(l)
	if len(names) != len(region) {
		return fmt.Errorf("%w: %d layer names for a layout of %d layers (descriptors.Layout: one name per layer, groups after one another)", ErrUnsupported, len(names), len(region))
	}
	seen := make(map[string]int, len(names))
	for i, name := range names {
		if j, dup := seen[name]; dup {
			return fmt.Errorf("%w: layer name %q is given to layers %d and %d", ErrUnsupported, name, j, i)
		}
		seen[name] = i
	}
	m.RegionMembers = make([][]string, len(l.Regions))
	for i, r := range region {
		m.RegionMembers[r] = append(m.RegionMembers[r], names[i])
	}
	for r, names := range m.RegionMembers {
		if len(names) == 0 {
			return fmt.Errorf("%w: region %d holds no layer of the layout's groups", ErrUnsupported, r)
		}
	}
	if !v.PairsByLayer() {
		return nil
	}
	groupOf := make(map[string]int, len(names))
	for i, name := range names {
		groupOf[name] = group[i]
	}
	for _, members := range m.RegionMembers {
		for _, name := range members {
			m.LayerGroupIDs = append(m.LayerGroupIDs, LayerGroup{Layer: name, Group: groupOf[name]})
		}
	}
	return m.Validate()
}
