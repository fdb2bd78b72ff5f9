package vllm

import "fmt"

// MaxLayerEntries bounds the entries of layer_group_ids and of
// packed_member_layouts: one per layer at most.
const MaxLayerEntries = MaxRegionMembers

// decodeLayerGroups reads layer_group_ids, a dict[str, int] of at most
// MaxLayerEntries entries, in its wire order; nil when empty.
func decodeLayerGroups(rd *mpReader) ([]LayerGroup, error) {
	n, err := rd.MapLen(MaxLayerEntries)
	if err != nil || n == 0 {
		return nil, err
	}
	vs := make([]LayerGroup, n)
	for i := range vs {
		if vs[i].Layer, err = rd.str(); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if vs[i].Group, err = rd.int(0); err != nil {
			return nil, fmt.Errorf("layer %q: %w", vs[i].Layer, err)
		}
	}
	return vs, nil
}

// decodePackedMembers reads packed_member_layouts, a dict[str, tuple[int,
// int]] of at most MaxLayerEntries entries, in its wire order; nil when
// empty.
func decodePackedMembers(rd *mpReader) ([]PackedMember, error) {
	n, err := rd.MapLen(MaxLayerEntries)
	if err != nil || n == 0 {
		return nil, err
	}
	vs := make([]PackedMember, n)
	for i := range vs {
		if vs[i].Layer, err = rd.str(); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		p, err := decodePair(rd)
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", vs[i].Layer, err)
		}
		vs[i].Offset, vs[i].PageLen = p[0], p[1]
	}
	return vs, nil
}

// validateDicts is the part of Validate about layer_group_ids and
// packed_member_layouts: valid names, each named once, groups in [0,
// MaxInt], a page that fits past its offset, and at most MaxLayerEntries
// entries.
func (m *AgentMetadata) validateDicts() error {
	if n := len(m.LayerGroupIDs); n > MaxLayerEntries {
		return metadataErr(metadataKeys[kLayerGroupIDs], "has %d entries, limit %d", n, MaxLayerEntries)
	}
	if n := len(m.PackedMemberLayouts); n > MaxLayerEntries {
		return metadataErr(metadataKeys[kPackedMemberLayouts], "has %d entries, limit %d", n, MaxLayerEntries)
	}
	seen := make(map[string]bool, len(m.LayerGroupIDs))
	for i, e := range m.LayerGroupIDs {
		switch {
		case checkString(e.Layer) != "":
			return metadataErr(metadataKeys[kLayerGroupIDs], "key %d %s", i, checkString(e.Layer))
		case seen[e.Layer]:
			return metadataErr(metadataKeys[kLayerGroupIDs], "names layer %q twice", e.Layer)
		case e.Group < 0 || e.Group > MaxInt:
			return metadataErr(metadataKeys[kLayerGroupIDs], "gives layer %q group %d, outside [0, %d]", e.Layer, e.Group, MaxInt)
		}
		seen[e.Layer] = true
	}
	clear(seen)
	for i, e := range m.PackedMemberLayouts {
		switch {
		case checkString(e.Layer) != "":
			return metadataErr(metadataKeys[kPackedMemberLayouts], "key %d %s", i, checkString(e.Layer))
		case seen[e.Layer]:
			return metadataErr(metadataKeys[kPackedMemberLayouts], "names layer %q twice", e.Layer)
		case e.Offset > e.Offset+e.PageLen:
			return metadataErr(metadataKeys[kPackedMemberLayouts], "gives layer %q offset %d and page %d bytes, past 2^64", e.Layer, e.Offset, e.PageLen)
		}
		seen[e.Layer] = true
	}
	return nil
}
