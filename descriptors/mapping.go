package descriptors

// Map pairs srcBlocks (on src) with dstBlocks (on dst) for one source rank and
// one destination rank, with no prefix hit, one descriptor pair per region and
// block (per head too where the block sizes differ). It is MapRequest with
// Request{SrcBlocks: srcBlocks, DstBlocks: dstBlocks}. Use MapCoalesced for
// the lists to post.
func Map(src, dst *Layout, srcBlocks, dstBlocks []int) (Transfer, error) {
	return MapRequest(src, dst, Request{SrcBlocks: srcBlocks, DstBlocks: dstBlocks})
}

// MapRequest pairs a request's source blocks with its destination blocks for
// one source rank and one destination rank (see Request for the lists and the
// prefix hit). The lists are not coalesced: each pair lies inside one block on
// each side, which is what tests and per-block accounting want.
//
// What it produces, region by region (regions in order, same index on both
// sides):
//   - equal block sizes: one pair per block, covering the heads both ranks
//     hold, at their offsets inside each block (the whole block when TP sizes
//     are equal or for MLA; a head slice otherwise);
//   - block sizes in an integer ratio: one pair per head per smaller block,
//     taking the tokens in order (a large block is several small ones).
//
// src and dst must be a pair that Sources or Targets names (their heads must
// intersect). Errors match ErrInvalid (bad layout, block id, list lengths, or
// no common head) or ErrIncompatible (layouts that cannot exchange blocks)
// and name both sides' values. On error the Transfer is empty.
func MapRequest(src, dst *Layout, req Request) (Transfer, error) {
	p, err := newPlan(src, dst, req)
	if err != nil {
		return Transfer{}, err
	}
	n := p.perRegion()
	t := p.build(false, n)
	t.regionPairs = n
	return t, nil
}

// MapCoalesced returns what Coalesce(MapRequest(src, dst, req)) returns,
// but walks the request once for one region, shifts the result into the
// others, and allocates only the two result slices: it is the call for the
// transfer path. Stats counts the pairs MapRequest would give (Before) and
// the pairs returned (After).
func MapCoalesced(src, dst *Layout, req Request) (Transfer, Stats, error) {
	p, err := newPlan(src, dst, req)
	if err != nil {
		return Transfer{}, Stats{}, err
	}
	n := p.walk(true, nil, nil)
	t := p.build(true, n)
	t.regionPairs = -1
	regions := len(p.src.Regions) // a stage's view: the layers both hold
	return t, Stats{Before: p.perRegion() * regions, After: n * regions}, nil
}

// MapCoalescedInto is MapCoalesced writing into buf: it reuses the capacity
// of buf.Src.Descs and buf.Dst.Descs and allocates nothing once they are
// large enough, so a writer or reader goroutine that keeps one buf per peer
// maps requests without garbage. Reuse buf only after the agent call that
// took its lists (CreateXferReq, PrepXferDlist) has returned; the lists'
// contents are overwritten. On error buf is left unchanged.
func MapCoalescedInto(buf *Transfer, src, dst *Layout, req Request) (Stats, error) {
	if buf == nil {
		return Stats{}, invalidf("MapCoalescedInto: buf is nil")
	}
	p, err := newPlan(src, dst, req)
	if err != nil {
		return Stats{}, err
	}
	n := p.walk(true, nil, nil)
	p.fill(buf, true, n)
	buf.regionPairs = -1
	regions := len(p.src.Regions) // a stage's view: the layers both hold
	return Stats{Before: p.perRegion() * regions, After: n * regions}, nil
}
