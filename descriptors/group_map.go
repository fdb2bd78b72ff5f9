package descriptors

import (
	"slices"
	"strconv"

	"github.com/gonixl/gonixl/nixl"
)

// GroupRequest names one request's blocks on both sides of a pair, one
// list per KV-cache group in group order, as vLLM's remote_block_ids and
// local_block_ids and PUSH_REG's local_block_ids carry them. A layout
// without groups has one group ([Layout.GroupList]), so a request between
// two of them is GroupRequest{Tokens, [][]int{src}, [][]int{dst}}.
//
// Ids are logical blocks (see [Group]). Each attention group's list is a
// suffix of the request's blocks, in token order: it ends with the block
// holding the request's last token (token Tokens-1), and whatever it leaves
// out at the front is not listed. That one rule covers the three reasons a
// list is short: a destination prefix-cache hit (its cached blocks are not
// listed), a sliding window (only the blocks holding the window are
// listed, on either side), and an empty list (nothing of the group moves).
// Lists are aligned by Tokens, so their block sizes may differ.
//
// An SSM group's lists are state slots: a destination slot receives the
// state of the source slot at the same position from the end (vLLM trims
// the longer list at the front the same way); the destination may list
// fewer slots than the source, not more.
type GroupRequest struct {
	// Tokens is the request's length in tokens; both engines know it (the
	// prefill computed it, and vLLM's Params carry it as remote_num_tokens).
	Tokens int
	// Src and Dst are the source's and the destination's block ids, one
	// list per group.
	Src [][]int
	Dst [][]int
}

// MapGroupsRequest pairs a grouped request's source blocks with its
// destination blocks for one source rank and one destination rank, group by
// group, without coalescing: each pair lies inside one block (one state
// slot for SSM) on each side. Groups appear in order, each with its regions
// in order.
//
// What each group moves between the two ranks:
//   - full and MLA attention: what [MapRequest] moves, for the tokens from
//     the start of the destination's list to the end of the request; the
//     source's list must start no later (else the source lacks tokens);
//   - sliding window: the same, from the later of the two lists' starts;
//     the source's list must hold the window (the request's last Window
//     tokens), and destination tokens before the source's list are left
//     as they are (they lie outside the window);
//   - SSM: for each slot pair and each SSM layer, each part's bytes that
//     both ranks hold (all of it at equal TP; the overlap of the two
//     ranks' shares across TP sizes, one run per part).
//
// Across TP sizes a group may have nothing to move between a pair that
// [Sources] names for another group; a pair that no group feeds is an
// error. Block ids are checked per group against the group's logical block
// count; destination ids must be distinct within a group, and across
// groups that share a region no physical block may be named twice. Errors
// match ErrInvalid or ErrIncompatible and name the group, the field and
// both values; on error the Transfer is empty.
func MapGroupsRequest(src, dst *Layout, req GroupRequest) (Transfer, error) {
	gp, err := newGroupPlans(src, dst, req)
	if err != nil {
		return Transfer{}, err
	}
	var t Transfer
	gp.into(&t, false)
	return t, nil
}

// MapGroups returns what Coalesce(MapGroupsRequest(src, dst, req)) returns:
// the lists to post, merged where both sides continue, never across a
// region or a group. Stats counts the pairs before and after merging.
func MapGroups(src, dst *Layout, req GroupRequest) (Transfer, Stats, error) {
	gp, err := newGroupPlans(src, dst, req)
	if err != nil {
		return Transfer{}, Stats{}, err
	}
	var t Transfer
	st := gp.into(&t, true)
	return t, st, nil
}

// MapGroupsInto is MapGroups writing into buf: it reuses the capacity of
// buf's lists, so a connector that keeps one buf per peer allocates only
// the small per-group work lists once they are large enough. As with
// MapCoalescedInto, reuse buf only after the agent call that took its lists
// has returned; on error buf is left unchanged.
func MapGroupsInto(buf *Transfer, src, dst *Layout, req GroupRequest) (Stats, error) {
	if buf == nil {
		return Stats{}, invalidf("MapGroupsInto: buf is nil")
	}
	gp, err := newGroupPlans(src, dst, req)
	if err != nil {
		return Stats{}, err
	}
	return gp.into(buf, true), nil
}

// groupPlans is one request's plan for every group of a pair.
type groupPlans struct {
	src, dst *Layout
	attn     []*plan    // per group; nil for SSM groups and groups with nothing to move
	ssm      []*ssmPlan // per group; nil for attention groups
	views    []Layout   // the attention views the plans point into (2 per group)
}

// newGroupPlans checks the pair and the request and plans every group.
func newGroupPlans(src, dst *Layout, req GroupRequest) (*groupPlans, error) {
	if err := Compatible(src, dst); err != nil {
		return nil, err
	}
	sg, dg := src.GroupList(), dst.GroupList()
	switch {
	case len(req.Src) != len(sg):
		return nil, invalidf("GroupRequest.Src has %d lists, the layouts have %d KV-cache groups", len(req.Src), len(sg))
	case len(req.Dst) != len(dg):
		return nil, invalidf("GroupRequest.Dst has %d lists, the layouts have %d KV-cache groups", len(req.Dst), len(dg))
	case req.Tokens < 0 || req.Tokens > maxDescs:
		return nil, invalidf("GroupRequest.Tokens is %d, want in [0, %d]", req.Tokens, maxDescs)
	}
	gp := &groupPlans{src: src, dst: dst, attn: make([]*plan, len(sg)), ssm: make([]*ssmPlan, len(sg)),
		views: make([]Layout, 2*len(sg))}
	fed := false
	for i := range sg {
		a, b := &sg[i], &dg[i]
		if err := checkGroupIDs(i, "source", req.Src[i], src.NumBlocks/a.ratio(), false); err != nil {
			return nil, err
		}
		if err := checkGroupIDs(i, "destination", req.Dst[i], dst.NumBlocks/b.ratio(), true); err != nil {
			return nil, err
		}
		// Every group's lists are checked, fed by this pair or not, so that
		// a request is refused the same way by every pair.
		feeds := slices.Contains(groupSourcesOf(src, dst, a, b), src.TPRank)
		fed = fed || feeds
		if a.Kind == KindSSM {
			sp, err := newSSMPlan(i, src, dst, a, b, req.Src[i], req.Dst[i])
			if err != nil {
				return nil, err
			}
			if feeds {
				gp.ssm[i] = sp
			}
			continue
		}
		gp.views[2*i], gp.views[2*i+1] = src.view(a), dst.view(b)
		p, err := newAttentionPlan(i, &gp.views[2*i], &gp.views[2*i+1], a, b, req.Tokens, req.Src[i], req.Dst[i], feeds)
		if err != nil {
			return nil, err
		}
		gp.attn[i] = p
	}
	if !fed {
		return nil, invalidf("source rank %d feeds no KV-cache group of destination rank %d: pick the pair with Sources or Targets", src.TPRank, dst.TPRank)
	}
	if err := checkSharedBlocks(dg, req.Dst); err != nil {
		return nil, err
	}
	return gp, nil
}

// checkGroupIDs is checkBlockIDs for one group's logical ids.
func checkGroupIDs(gi int, side string, ids []int, numBlocks int, unique bool) error {
	if err := checkBlockIDs(side, ids, numBlocks, unique); err != nil {
		e := err.(*mappingError)
		return &mappingError{kind: e.kind, msg: "Groups[" + strconv.Itoa(gi) + "]: " + e.msg}
	}
	return nil
}

// newAttentionPlan checks one attention group's suffix lists and, when the
// pair feeds the group, plans it: it expands logical ids to physical ones
// and places both lists by Tokens. It returns a nil plan when the pair
// does not feed the group.
func newAttentionPlan(gi int, sv, dv *Layout, a, b *Group, tokens int, srcIDs, dstIDs []int, feeds bool) (*plan, error) {
	sLog, dLog := sv.BlockSize*a.ratio(), dv.BlockSize*b.ratio()
	nS, nD := ceilDiv(tokens, sLog), ceilDiv(tokens, dLog)
	if len(srcIDs) > nS {
		return nil, invalidf("Groups[%d] (%s): source lists %d blocks of %d tokens, more than the %d that hold the request's %d tokens",
			gi, a.Kind, len(srcIDs), sLog, nS, tokens)
	}
	if len(dstIDs) > nD {
		return nil, invalidf("Groups[%d] (%s): destination lists %d blocks of %d tokens, more than the %d that hold the request's %d tokens",
			gi, a.Kind, len(dstIDs), dLog, nD, tokens)
	}
	p := &plan{}
	if feeds {
		if err := p.pair(sv, dv); err != nil {
			e := err.(*mappingError)
			return nil, &mappingError{kind: e.kind, msg: "Groups[" + strconv.Itoa(gi) + "]: " + e.msg}
		}
	}
	if len(dstIDs) == 0 {
		return okPlan(p, feeds), nil // nothing of this group moves
	}
	// The physical lists are built before the walk's own bound applies:
	// bound them first, ids being real data but ratios a peer's claim.
	if len(srcIDs) > MaxPairs/a.ratio() || len(dstIDs) > MaxPairs/b.ratio() {
		return nil, invalidf("Groups[%d] (%s): %d source blocks x PhysicalPerLogical %d or %d destination blocks x %d exceed MaxPairs %d physical blocks",
			gi, a.Kind, len(srcIDs), a.ratio(), len(dstIDs), b.ratio(), MaxPairs)
	}
	srcTok, dstTok := (nS-len(srcIDs))*sLog, (nD-len(dstIDs))*dLog
	if a.Kind == KindSlidingWindow {
		if need := max(0, tokens-a.Window); srcTok > need {
			return nil, invalidf("Groups[%d] (sliding_window, Window %d): source blocks start at token %d, after the window of the request's %d tokens, which starts at token %d",
				gi, a.Window, srcTok, tokens, need)
		}
	} else if srcTok > dstTok {
		return nil, invalidf("Groups[%d] (%s): source blocks start at token %d, after the destination's at token %d: the source lacks tokens the destination needs",
			gi, a.Kind, srcTok, dstTok)
	}
	if !feeds {
		return nil, nil
	}
	p.srcBlocks, p.dstBlocks = expand(srcIDs, a.ratio()), expand(dstIDs, b.ratio())
	u := p.unitTokens
	p.srcStart, p.dstStart = srcTok/u, dstTok/u
	p.first, p.end = max(p.srcStart, p.dstStart), ceilDiv(tokens, u)
	return p, p.bound()
}

// okPlan returns p when the pair feeds the group, else nil.
func okPlan(p *plan, feeds bool) *plan {
	if feeds {
		return p
	}
	return nil
}

// expand turns logical block ids into physical ones: b -> b*r .. b*r+r-1.
func expand(ids []int, r int) []int {
	if r == 1 {
		return ids
	}
	out := make([]int, 0, len(ids)*r)
	for _, b := range ids {
		for j := 0; j < r; j++ {
			out = append(out, b*r+j)
		}
	}
	return out
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// checkSharedBlocks refuses a destination physical block named by two
// groups that share its region: both would write it. Each list is a set of
// physical intervals [b*r, (b+1)*r); two groups collide when intervals of
// both overlap, found by sorting (no per-block memory).
func checkSharedBlocks(groups []Group, lists [][]int) error {
	if len(groups) < 2 {
		return nil
	}
	type span struct{ lo, hi, group, index int }
	for i := range groups {
		for j := i + 1; j < len(groups); j++ {
			if !shareRegion(&groups[i], &groups[j]) {
				continue
			}
			spans := make([]span, 0, len(lists[i])+len(lists[j]))
			for _, g := range []int{i, j} {
				r := groups[g].ratio()
				for k, b := range lists[g] {
					spans = append(spans, span{b * r, (b + 1) * r, g, k})
				}
			}
			slices.SortFunc(spans, func(a, b span) int { return a.lo - b.lo })
			for k := 1; k < len(spans); k++ {
				a, b := spans[k-1], spans[k]
				if b.lo < a.hi && a.group != b.group {
					if a.group > b.group {
						a, b = b, a
					}
					return invalidf("destination physical block %d is named by Groups[%d] (block %d at index %d) and Groups[%d] (block %d at index %d), which share a region",
						max(a.lo, b.lo), a.group, lists[a.group][a.index], a.index, b.group, lists[b.group][b.index], b.index)
				}
			}
		}
	}
	return nil
}

func shareRegion(a, b *Group) bool {
	for _, r := range a.Regions {
		if slices.Contains(b.Regions, r) {
			return true
		}
	}
	return false
}

// into writes every group's pairs into t (reusing its lists' capacity),
// merged or not, group after group; unmerged, it records where each
// region's chunk starts so that Coalesce merges inside chunks only. SSM
// groups are built unmerged and merged chunk by chunk (they are a few pairs
// per slot); attention groups are walked twice, once to count, as
// MapCoalesced does.
func (gp *groupPlans) into(t *Transfer, merge bool) Stats {
	var st Stats
	counts := make([]int, len(gp.attn))
	ssm := make([]Transfer, len(gp.attn))
	total := 0
	for i, p := range gp.attn {
		switch {
		case p != nil:
			st.Before += p.perRegion() * len(p.src.Regions)
			counts[i] = p.perRegion()
			if merge {
				counts[i] = p.walk(true, nil, nil)
			}
			total += counts[i] * len(p.src.Regions)
		case gp.ssm[i] != nil:
			part, chunk := gp.ssm[i].build()
			st.Before += part.Len()
			counts[i] = chunk
			if merge && chunk > 0 {
				part.regionPairs = chunk
				part, _ = Coalesce(part)
			}
			ssm[i] = part
			total += part.Len()
		}
	}
	sAll, dAll := reuse(t, total)
	*t = Transfer{Src: nixl.XferList{Mem: gp.src.Mem, Descs: sAll}, Dst: nixl.XferList{Mem: gp.dst.Mem, Descs: dAll}, regionPairs: -1}
	if !merge {
		t.regionPairs, t.bounds = 0, []int{}
	}
	at := 0
	for i, p := range gp.attn {
		var n, regions int
		switch {
		case p != nil:
			regions = len(p.src.Regions)
			n = counts[i] * regions
			t.Bytes += p.fillInto(sAll[at:at+n], dAll[at:at+n], merge, counts[i])
		case gp.ssm[i] != nil:
			regions = len(gp.ssm[i].srcRegions)
			n = ssm[i].Len()
			copy(sAll[at:], ssm[i].Src.Descs)
			copy(dAll[at:], ssm[i].Dst.Descs)
			t.Bytes += ssm[i].Bytes
		default:
			continue
		}
		for r := 0; r < regions && !merge && counts[i] > 0; r++ {
			t.bounds = append(t.bounds, at+r*counts[i])
		}
		at += n
	}
	st.After = total
	return st
}
