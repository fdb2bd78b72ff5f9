package descriptors

import "github.com/gonixl/gonixl/nixl"

// MaxPairs bounds the uncoalesced descriptor pairs of one Transfer (16M,
// about 800 MB of lists). A 16k-token request of a 64-layer model with K and
// V regions and 16-token blocks needs 131072 even fully fragmented.
const MaxPairs = 1 << 24

// plan is the geometry of one request between one source rank and one
// destination rank, reduced to what the walk needs. The request is cut into
// units of unit tokens, the smaller of the two block sizes, so that every
// unit lies inside one block on each side; a unit is the finest grain the
// mapping ever works at (never single tokens).
type plan struct {
	src, dst   *Layout
	srcBlocks  []int
	dstBlocks  []int
	first, end int // units [first, end) of the request move; first = DstCached blocks' units

	unitTokens int // tokens per unit
	srcUnits   int // units per source block
	dstUnits   int // units per destination block

	srcHead, dstHead int // first moved head, counted from each rank's first head
	heads            int // number of heads moved
	pieceHeads       int // heads per piece: all moved heads when block sizes are equal, else 1

	// srcStart and dstStart are the units where each list's first block
	// begins: 0 and first for a Request (the source list starts at token
	// 0); for a group's suffix lists (GroupRequest), wherever they start.
	srcStart, dstStart int
	// tokens is set when an NHD side makes the walk cut per token (see
	// walkTokens).
	tokens bool
}

// newPlan checks the pair and the request and derives the plan. It does not
// allocate except for an oversized duplicate check.
func newPlan(src, dst *Layout, req Request) (plan, error) {
	var p plan
	if err := Compatible(src, dst); err != nil {
		return p, err
	}
	if err := refuseGroups(src, dst); err != nil {
		return p, err
	}
	// A pipeline stage moves only the layers both sides hold.
	src, dst = stageViews(src, dst)
	if err := p.pair(src, dst); err != nil {
		return p, err
	}
	p.srcBlocks, p.dstBlocks = req.SrcBlocks, req.DstBlocks

	if err := checkBlockIDs("source", req.SrcBlocks, src.NumBlocks, false); err != nil {
		return p, err
	}
	if err := checkBlockIDs("destination", req.DstBlocks, dst.NumBlocks, true); err != nil {
		return p, err
	}
	if req.DstCached < 0 {
		return p, invalidf("DstCached %d is negative", req.DstCached)
	}
	if len(req.DstBlocks) == 0 {
		return p, nil // everything the destination needs is cached: nothing moves
	}
	if req.DstCached > maxDescs {
		return p, invalidf("DstCached %d too large", req.DstCached)
	}
	p.first = req.DstCached * p.dstUnits
	p.dstStart = p.first
	srcEnd := len(req.SrcBlocks) * p.srcUnits
	dstEnd := p.first + len(req.DstBlocks)*p.dstUnits
	p.end = min(srcEnd, dstEnd)
	// Each list must reach the end of the request with only its last block
	// partly used: the last block of each must hold at least one moved unit.
	if p.end <= srcEnd-p.srcUnits || p.end <= dstEnd-p.dstUnits {
		return p, invalidf("block lists do not cover the same tokens: source %d blocks of %d tokens (tokens %d..%d), destination %d cached + %d blocks of %d tokens (tokens %d..%d)",
			len(req.SrcBlocks), src.BlockSize, (srcEnd-p.srcUnits)*p.unitTokens+1, srcEnd*p.unitTokens,
			req.DstCached, len(req.DstBlocks), dst.BlockSize, (dstEnd-p.dstUnits)*p.unitTokens+1, dstEnd*p.unitTokens)
	}
	return p, p.bound()
}

// refuseGroups keeps the single-group entry points to layouts without
// groups: a grouped layout's block ids come per group.
func refuseGroups(src, dst *Layout) error {
	if len(src.Groups) > 0 {
		return invalidf("source layout has %d KV-cache groups: map its requests with MapGroups", len(src.Groups))
	}
	if len(dst.Groups) > 0 {
		return invalidf("destination layout has %d KV-cache groups: map its requests with MapGroups", len(dst.Groups))
	}
	return nil
}

// bound limits the work and the result before anything is allocated:
// layouts come from the network, and a hostile block-size ratio or head
// count must give an error, not an out-of-memory crash.
func (p *plan) bound() error {
	units, pieces, regions := p.end-p.first, p.heads/p.pieceHeads, len(p.src.Regions)
	if p.tokens {
		// Worst case: one piece per token and head.
		units, pieces = (p.end-p.first)*p.unitTokens, p.heads
		if p.unitTokens > MaxPairs || units > MaxPairs {
			return invalidf("request needs %d tokens x %d heads x %d regions descriptor pairs, more than MaxPairs %d",
				units, pieces, regions, MaxPairs)
		}
	}
	if units > MaxPairs/pieces || units*pieces > MaxPairs/regions {
		return invalidf("request needs %d units x %d head pieces x %d regions descriptor pairs, more than MaxPairs %d",
			units, pieces, regions, MaxPairs)
	}
	return nil
}

// pair derives what a plan needs from the two layouts alone: the heads
// both ranks hold and the units.
func (p *plan) pair(src, dst *Layout) error {
	p.src, p.dst = src, dst

	// Heads both ranks hold.
	if src.MLA {
		p.heads = src.KVHeads
	} else {
		s0, d0 := src.FirstHead(), dst.FirstHead()
		lo, hi := max(s0, d0), min(s0+src.KVHeads, d0+dst.KVHeads)
		if lo >= hi {
			return invalidf("no KV head in common: source rank %d holds heads [%d, %d), destination rank %d holds [%d, %d); pick the pair with Sources or Targets",
				src.TPRank, s0, s0+src.KVHeads, dst.TPRank, d0, d0+dst.KVHeads)
		}
		p.srcHead, p.dstHead, p.heads = lo-s0, lo-d0, hi-lo
	}
	if src.nhd() || dst.nhd() {
		// Both NHD with every head of each block and equal block sizes is
		// a whole-block copy, which the plain walk does; anything else
		// cuts per token.
		whole := src.nhd() && dst.nhd() && src.BlockSize == dst.BlockSize &&
			p.heads == src.KVHeads && p.heads == dst.KVHeads
		p.tokens = !whole
	}

	p.unitTokens = min(src.BlockSize, dst.BlockSize)
	p.srcUnits = src.BlockSize / p.unitTokens
	p.dstUnits = dst.BlockSize / p.unitTokens
	p.pieceHeads = 1
	if p.srcUnits == 1 && p.dstUnits == 1 {
		p.pieceHeads = p.heads
	}
	return nil
}

// checkBlockIDs verifies that every id is a block of the layout and, for the
// destination, that no block appears twice (it would be written twice).
func checkBlockIDs(side string, ids []int, numBlocks int, unique bool) error {
	for i, b := range ids {
		if b < 0 || b >= numBlocks {
			return invalidf("%s block id %d at index %d out of range [0, %d)", side, b, i, numBlocks)
		}
	}
	if !unique || len(ids) < 2 {
		return nil
	}
	var small [256]uint64 // 16384 blocks without allocating
	seen := small[:]
	if words := (numBlocks + 63) / 64; words > len(small) {
		seen = make([]uint64, words)
	}
	for i, b := range ids {
		w, bit := b/64, uint64(1)<<(b%64)
		if seen[w]&bit != 0 {
			return invalidf("%s block id %d appears twice (again at index %d)", side, b, i)
		}
		seen[w] |= bit
	}
	return nil
}

// perRegion returns the number of pairs one region gets before coalescing.
func (p *plan) perRegion() int {
	if p.tokens {
		return p.walkTokens(false, nil, nil)
	}
	return (p.end - p.first) * (p.heads / p.pieceHeads)
}

// walk produces the pairs of region 0 in canonical order, into srcOut and
// dstOut when they are non-nil, and returns how many there are. With merge,
// a pair whose source and destination both continue the previous pair
// extends it instead. Every region yields the same pairs shifted by its base,
// because adjacency inside a region does not depend on the base.
//
// Order: the request is cut into groups, one block of the side with the
// larger blocks each; within a group, pieces run head by head, and within a
// head, unit by unit. That makes each head's run through a large block one
// stretch of memory on that side, which is where merges are possible.
func (p *plan) walk(merge bool, srcOut, dstOut []nixl.Desc) int {
	if p.tokens {
		return p.walkTokens(merge, srcOut, dstOut)
	}
	if p.srcUnits == 1 && p.dstUnits == 1 {
		return p.walkEqual(merge, srcOut, dstOut)
	}
	src, dst := p.src, p.dst
	hb := uint64(src.HeadBytes)
	unitLen := uint64(p.unitTokens) * hb
	srcBlockLen, dstBlockLen := src.BlockLen(), dst.BlockLen()
	srcHeadStride := uint64(src.BlockSize) * hb
	dstHeadStride := uint64(dst.BlockSize) * hb
	sBase, dBase := src.Regions[0].Base, dst.Regions[0].Base
	sDev, dDev := src.Regions[0].DevID, dst.Regions[0].DevID

	group := max(p.srcUnits, p.dstUnits)
	w := pairWriter{merge: merge, src: srcOut, dst: dstOut, srcDev: sDev, dstDev: dDev, len: unitLen}
	for g := p.first / group * group; g < p.end; g += group {
		lo, hi := max(g, p.first), min(g+group, p.end)
		// Position of unit lo on each side; the loops below step it
		// without dividing.
		sIdx0, sSub0 := (lo-p.srcStart)/p.srcUnits, (lo-p.srcStart)%p.srcUnits
		dIdx0, dSub0 := (lo-p.dstStart)/p.dstUnits, (lo-p.dstStart)%p.dstUnits
		for h := 0; h < p.heads; h++ {
			srcHeadOff := sBase + uint64(p.srcHead+h)*srcHeadStride
			dstHeadOff := dBase + uint64(p.dstHead+h)*dstHeadStride
			sIdx, sSub, dIdx, dSub := sIdx0, sSub0, dIdx0, dSub0
			for u := lo; u < hi; u++ {
				w.put(srcHeadOff+uint64(p.srcBlocks[sIdx])*srcBlockLen+uint64(sSub)*unitLen,
					dstHeadOff+uint64(p.dstBlocks[dIdx])*dstBlockLen+uint64(dSub)*unitLen)
				if sSub++; sSub == p.srcUnits {
					sIdx, sSub = sIdx+1, 0
				}
				if dSub++; dSub == p.dstUnits {
					dIdx, dSub = dIdx+1, 0
				}
			}
		}
	}
	return w.n
}

// walkEqual is walk for equal block sizes: one piece per block pair, all
// common heads at once, no division.
func (p *plan) walkEqual(merge bool, srcOut, dstOut []nixl.Desc) int {
	src, dst := p.src, p.dst
	hb := uint64(src.HeadBytes)
	pieceLen := uint64(p.unitTokens) * hb * uint64(p.heads)
	srcBlockLen, dstBlockLen := src.BlockLen(), dst.BlockLen()
	sOff := src.Regions[0].Base + uint64(p.srcHead)*uint64(src.BlockSize)*hb
	dOff := dst.Regions[0].Base + uint64(p.dstHead)*uint64(dst.BlockSize)*hb
	w := pairWriter{merge: merge, src: srcOut, dst: dstOut,
		srcDev: src.Regions[0].DevID, dstDev: dst.Regions[0].DevID, len: pieceLen}
	srcIDs := p.srcBlocks[p.first-p.srcStart : p.end-p.srcStart]
	dstIDs := p.dstBlocks[p.first-p.dstStart:][:len(srcIDs)]
	for i, sb := range srcIDs {
		w.put(sOff+uint64(sb)*srcBlockLen, dOff+uint64(dstIDs[i])*dstBlockLen)
	}
	return w.n
}

// pairWriter appends equal-length pairs to preallocated lists (or only
// counts them when the lists are nil), extending the last pair instead when
// merging and both sides continue it.
type pairWriter struct {
	merge          bool
	src, dst       []nixl.Desc
	srcDev, dstDev uint64
	len            uint64
	n              int
	srcEnd, dstEnd uint64 // where the last pair ends

	lastSrcBlock, lastDstBlock int // blocks of the last piece (putIn)
}

func (w *pairWriter) put(s, d uint64) {
	if w.merge && w.n > 0 && s == w.srcEnd && d == w.dstEnd {
		if w.src != nil {
			w.src[w.n-1].Len += w.len
			w.dst[w.n-1].Len += w.len
		}
	} else {
		if w.src != nil {
			w.src[w.n] = nixl.Desc{Addr: s, Len: w.len, DevID: w.srcDev}
			w.dst[w.n] = nixl.Desc{Addr: d, Len: w.len, DevID: w.dstDev}
		}
		w.n++
	}
	w.srcEnd, w.dstEnd = s+w.len, d+w.len
}

// build allocates the result for count pairs per region (one allocation for
// both lists), walks region 0 and shifts its pairs into every other region.
func (p *plan) build(merge bool, count int) Transfer {
	var t Transfer
	p.fill(&t, merge, count)
	return t
}

// fill is build into t, reusing the capacity of t's lists when it suffices.
func (p *plan) fill(t *Transfer, merge bool, count int) {
	src, dst := p.src, p.dst
	total := count * len(src.Regions)
	sDescs, dDescs := reuse(t, total)
	*t = Transfer{
		Src: nixl.XferList{Mem: src.Mem, Descs: sDescs},
		Dst: nixl.XferList{Mem: dst.Mem, Descs: dDescs},
	}
	t.Bytes = p.fillInto(t.Src.Descs, t.Dst.Descs, merge, count)
}

// reuse returns t's lists resliced to n pairs when their capacity suffices,
// else two fresh lists in one allocation (the capacity limit on the first
// keeps an append to it from running into the second).
func reuse(t *Transfer, n int) (src, dst []nixl.Desc) {
	src, dst = t.Src.Descs, t.Dst.Descs
	if cap(src) < n || cap(dst) < n {
		all := make([]nixl.Desc, 2*n)
		src, dst = all[:0:n], all[n:n]
	}
	return src[:n], dst[:n]
}

// fillInto walks region 0 into the first count pairs of sAll and dAll and
// shifts them into every other region's count pairs after; it returns the
// bytes moved. The lists must hold count pairs per region.
func (p *plan) fillInto(sAll, dAll []nixl.Desc, merge bool, count int) uint64 {
	if count == 0 {
		return 0
	}
	src, dst := p.src, p.dst
	regions := len(src.Regions)
	s0, d0 := sAll[:count], dAll[:count]
	p.walk(merge, s0, d0)
	var bytes uint64
	for i := range s0 {
		bytes += s0[i].Len
	}
	for r := 1; r < regions; r++ {
		sr, dr := src.Regions[r], dst.Regions[r]
		sOut := sAll[r*count : (r+1)*count]
		dOut := dAll[r*count : (r+1)*count]
		sShift, dShift := sr.Base-src.Regions[0].Base, dr.Base-dst.Regions[0].Base
		for i := range s0 {
			sOut[i] = nixl.Desc{Addr: s0[i].Addr + sShift, Len: s0[i].Len, DevID: sr.DevID}
			dOut[i] = nixl.Desc{Addr: d0[i].Addr + dShift, Len: d0[i].Len, DevID: dr.DevID}
		}
	}
	return bytes * uint64(regions)
}
