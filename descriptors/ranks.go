package descriptors

import "slices"

// Sources returns the source TP ranks whose blocks destination rank
// dst.TPRank needs, in ascending order (src.TPRank is ignored). With equal TP
// it is the same rank; when the destination has more ranks, the one source
// rank holding its heads; when the source has more ranks, every source rank
// holding one of its heads; where the source replicates a head on several
// ranks, or with MLA (replicated KV), one of them, chosen by dst.TPRank so
// that load spreads. A pull connector on destination rank r reads from each
// rank in Sources, and a destination rank expects len(Sources) completions
// (notifications) per request.
//
// With KV-cache groups it is the union over the groups, ascending: each
// attention group's source ranks as above, and for an SSM group every
// source rank whose share of the state overlaps the destination's (with a
// larger source TP, several). [MapGroups] of a pair in the list maps what
// each group has to move between those two ranks, possibly nothing for
// some groups.
func Sources(src, dst *Layout) ([]int, error) {
	if err := Compatible(src, dst); err != nil {
		return nil, err
	}
	if len(src.Groups) > 0 || len(dst.Groups) > 0 {
		return groupSources(src, dst), nil
	}
	return attentionSources(src, dst), nil
}

// attentionSources is Sources for a compatible pair without groups (or
// the views of one attention group).
func attentionSources(src, dst *Layout) []int {
	out := make([]int, 0, 1)
	first, n := dst.FirstHead(), dst.KVHeads
	if dst.MLA {
		n = 1 // every source rank holds every latent head
	}
	for h := first; h < first+n; h++ {
		r := sourceRank(src, h, dst.TPRank)
		if len(out) == 0 || out[len(out)-1] != r {
			out = append(out, r)
		}
	}
	return out
}

// Targets returns the destination TP ranks that source rank src.TPRank feeds
// (dst.TPRank is ignored): the ranks r for which Sources with dst.TPRank = r
// contains src.TPRank, in ascending order. A push writer on source rank s
// writes into each of them; the list may be empty (MLA, or replicated heads,
// with more source than destination ranks), and then that writer has nothing
// to send for any request. In pull mode it is the set of destination ranks
// that read from source rank s, so s frees a request's blocks after
// len(Targets) read notifications.
func Targets(src, dst *Layout) ([]int, error) {
	if err := Compatible(src, dst); err != nil {
		return nil, err
	}
	var out []int
	if len(src.Groups) > 0 || len(dst.Groups) > 0 {
		d := *dst
		for r := 0; r < dst.TPSize; r++ {
			d.TPRank = r
			if slices.Contains(groupSources(src, &d), src.TPRank) {
				out = append(out, r)
			}
		}
		return out, nil
	}
	for r := 0; r < dst.TPSize; r++ {
		first, n := dst.firstHeadOf(r), dst.KVHeads
		if dst.MLA {
			n = 1
		}
		for h := first; h < first+n; h++ {
			if sourceRank(src, h, r) == src.TPRank {
				out = append(out, r)
				break
			}
		}
	}
	return out, nil
}

// sourceRank picks the source rank that serves head h to destination rank
// dstRank. Where several source ranks hold h, dstRank picks among them round
// robin, so that the destination ranks spread their reads.
func sourceRank(src *Layout, h, dstRank int) int {
	if src.MLA {
		return dstRank % src.TPSize
	}
	total := src.TotalKVHeads()
	if src.TPSize > total {
		reps := src.TPSize / total
		return h*reps + dstRank%reps
	}
	return h / src.KVHeads
}

// Compatible reports whether blocks can move from src to dst: both layouts
// pass the per-call checks of Validate, and they agree on NumLayers, DType,
// HeadBytes, MLA and the model's KV head count, and their block sizes divide
// one another. The error matches ErrIncompatible or ErrInvalid and names both
// sides' values. Memory types and TP sizes may differ.
//
// With KV-cache groups on either side (a side without groups is its one
// group, [Layout.GroupList]) both must have as many groups, and group by
// group the same kind and region count; attention groups must agree as
// above (their block sizes dividing one another), sliding-window groups on
// Window, and SSM groups on the model's bytes of each state part (bytes on
// a rank x TPSize), in which case the TP sizes need not divide each other.
// In-block orders (Order) may differ: the mapping permutes.
func Compatible(src, dst *Layout) error {
	if err := src.check(); err != nil {
		return sideError("source", err)
	}
	if err := dst.check(); err != nil {
		return sideError("destination", err)
	}
	if len(src.Groups) > 0 || len(dst.Groups) > 0 {
		return compatibleGroups(src, dst)
	}
	return compatibleSingle(src, dst)
}

// compatibleSingle is Compatible for two checked layouts without groups.
func compatibleSingle(src, dst *Layout) error {
	switch {
	case src.MLA != dst.MLA:
		return differ("MLA", src.MLA, dst.MLA)
	case src.KVPacked != dst.KVPacked:
		return differ("KVPacked", src.KVPacked, dst.KVPacked)
	case src.whole() && dst.whole() && src.NumLayers != dst.NumLayers:
		return differ("NumLayers", src.NumLayers, dst.NumLayers)
	case !src.whole() || !dst.whole():
		if err := compatibleStages(src, dst); err != nil {
			return err
		}
	}
	switch {
	case src.DType != dst.DType:
		return differ("DType", src.DType, dst.DType)
	case src.HeadBytes != dst.HeadBytes:
		return differ("HeadBytes", src.HeadBytes, dst.HeadBytes)
	case src.MLA && src.KVHeads != dst.KVHeads:
		return differ("KVHeads (MLA latent heads)", src.KVHeads, dst.KVHeads)
	case src.TotalKVHeads() != dst.TotalKVHeads():
		return incompatiblef("model KV heads differ: source %d (KVHeads %d x TPSize %d, ModelKVHeads %d), destination %d (KVHeads %d x TPSize %d, ModelKVHeads %d)",
			src.TotalKVHeads(), src.KVHeads, src.TPSize, src.ModelKVHeads,
			dst.TotalKVHeads(), dst.KVHeads, dst.TPSize, dst.ModelKVHeads)
	}
	a, b := src.BlockSize, dst.BlockSize
	if a < b {
		a, b = b, a
	}
	if a%b != 0 {
		return incompatiblef("BlockSize ratio is not an integer: source %d, destination %d", src.BlockSize, dst.BlockSize)
	}
	return nil
}

// sideError says which layout a layout error is about, keeping its kind.
func sideError(side string, err error) error {
	if e, ok := err.(*mappingError); ok {
		return &mappingError{kind: e.kind, msg: side + " layout: " + e.msg}
	}
	return err
}
