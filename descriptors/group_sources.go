package descriptors

// GroupSources is Sources for one KV-cache group: the source TP ranks that
// write group gi (a [Layout.GroupList] index) into destination rank
// dst.TPRank, ascending. Sources is their union over the groups; a rank
// Sources names may feed some groups only (across TP sizes an MLA group
// takes one source rank and an SSM group every rank whose share of the
// state overlaps). A staged push image holds only the groups its rank
// feeds, so it needs the groups apart.
func GroupSources(src, dst *Layout, gi int) ([]int, error) {
	if err := Compatible(src, dst); err != nil {
		return nil, err
	}
	sg, dg := src.GroupList(), dst.GroupList()
	if gi < 0 || gi >= len(sg) {
		return nil, invalidf("GroupSources: group %d out of range [0, %d)", gi, len(sg))
	}
	if len(src.Groups) == 0 && len(dst.Groups) == 0 {
		return attentionSources(src, dst), nil
	}
	return groupSourcesOf(src, dst, &sg[gi], &dg[gi]), nil
}
