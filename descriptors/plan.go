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
}

// newPlan checks the pair and the request and derives the plan. It does not
// allocate except for an oversized duplicate check.
func newPlan(src, dst *Layout, req Request) (plan, error) {
	var p plan
	if err := Compatible(src, dst); err != nil {
		return p, err
	}
	p.src, p.dst = src, dst
	p.srcBlocks, p.dstBlocks = req.SrcBlocks, req.DstBlocks

	// Heads both ranks hold.
	if src.MLA {
		p.heads = src.KVHeads
	} else {
		s0, d0 := src.FirstHead(), dst.FirstHead()
		lo, hi := max(s0, d0), min(s0+src.KVHeads, d0+dst.KVHeads)
		if lo >= hi {
			return p, invalidf("no KV head in common: source rank %d holds heads [%d, %d), destination rank %d holds [%d, %d); pick the pair with Sources or Targets",
				src.TPRank, s0, s0+src.KVHeads, dst.TPRank, d0, d0+dst.KVHeads)
		}
		p.srcHead, p.dstHead, p.heads = lo-s0, lo-d0, hi-lo
	}

	p.unitTokens = min(src.BlockTokens, dst.BlockTokens)
	p.srcUnits = src.BlockTokens / p.unitTokens
	p.dstUnits = dst.BlockTokens / p.unitTokens
	p.pieceHeads = 1
	if p.srcUnits == p.dstUnits {
		p.pieceHeads = p.heads
	}

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
	srcEnd := len(req.SrcBlocks) * p.srcUnits
	dstEnd := p.first + len(req.DstBlocks)*p.dstUnits
	p.end = min(srcEnd, dstEnd)
	// Each list must reach the end of the request with only its last block
	// partly used: the last block of each must hold at least one moved unit.
	if p.end <= srcEnd-p.srcUnits || p.end <= dstEnd-p.dstUnits {
		return p, invalidf("block lists do not cover the same tokens: source %d blocks of %d tokens (tokens %d..%d), destination %d cached + %d blocks of %d tokens (tokens %d..%d)",
			len(req.SrcBlocks), src.BlockTokens, (srcEnd-p.srcUnits)*p.unitTokens+1, srcEnd*p.unitTokens,
			req.DstCached, len(req.DstBlocks), dst.BlockTokens, (dstEnd-p.dstUnits)*p.unitTokens+1, dstEnd*p.unitTokens)
	}
	// Bound the work and the result before anything is allocated: layouts
	// come from the network, and a hostile block-size ratio or head count
	// must give an error, not an out-of-memory crash.
	units, pieces, regions := p.end-p.first, p.heads/p.pieceHeads, len(src.Regions)
	if units > MaxPairs/pieces || units*pieces > MaxPairs/regions {
		return p, invalidf("request needs %d units x %d head pieces x %d regions descriptor pairs, more than MaxPairs %d",
			units, pieces, regions, MaxPairs)
	}
	return p, nil
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
	src, dst := p.src, p.dst
	hb := uint64(src.HeadBytes)
	unitLen := uint64(p.unitTokens) * hb
	pieceLen := unitLen * uint64(p.pieceHeads)
	srcBlockLen, dstBlockLen := src.BlockLen(), dst.BlockLen()
	srcHeadStride := uint64(src.BlockTokens) * hb
	dstHeadStride := uint64(dst.BlockTokens) * hb
	sBase, dBase := src.Regions[0].Base, dst.Regions[0].Base
	sDev, dDev := src.Regions[0].DevID, dst.Regions[0].DevID

	group := max(p.srcUnits, p.dstUnits)
	n := 0
	var lastSrcEnd, lastDstEnd uint64
	for g := p.first / group * group; g < p.end; g += group {
		lo, hi := max(g, p.first), min(g+group, p.end)
		for h := 0; h < p.heads; h += p.pieceHeads {
			srcHeadOff := uint64(p.srcHead+h) * srcHeadStride
			dstHeadOff := uint64(p.dstHead+h) * dstHeadStride
			for u := lo; u < hi; u++ {
				v := u - p.first
				s := sBase + uint64(p.srcBlocks[u/p.srcUnits])*srcBlockLen + srcHeadOff + uint64(u%p.srcUnits)*unitLen
				d := dBase + uint64(p.dstBlocks[v/p.dstUnits])*dstBlockLen + dstHeadOff + uint64(v%p.dstUnits)*unitLen
				if merge && n > 0 && s == lastSrcEnd && d == lastDstEnd {
					if srcOut != nil {
						srcOut[n-1].Len += pieceLen
						dstOut[n-1].Len += pieceLen
					}
				} else {
					if srcOut != nil {
						srcOut[n] = nixl.Desc{Addr: s, Len: pieceLen, DevID: sDev}
						dstOut[n] = nixl.Desc{Addr: d, Len: pieceLen, DevID: dDev}
					}
					n++
				}
				lastSrcEnd, lastDstEnd = s+pieceLen, d+pieceLen
			}
		}
	}
	return n
}

// build allocates the result for count pairs per region, walks region 0 and
// shifts its pairs into every other region.
func (p *plan) build(merge bool, count int) Transfer {
	src, dst := p.src, p.dst
	regions := len(src.Regions)
	t := Transfer{
		Src: nixl.XferList{Mem: src.Mem, Descs: make([]nixl.Desc, count*regions)},
		Dst: nixl.XferList{Mem: dst.Mem, Descs: make([]nixl.Desc, count*regions)},
	}
	if count == 0 {
		return t
	}
	s0, d0 := t.Src.Descs[:count], t.Dst.Descs[:count]
	p.walk(merge, s0, d0)
	var bytes uint64
	for i := range s0 {
		bytes += s0[i].Len
	}
	t.Bytes = bytes * uint64(regions)
	for r := 1; r < regions; r++ {
		sr, dr := src.Regions[r], dst.Regions[r]
		sOut := t.Src.Descs[r*count : (r+1)*count]
		dOut := t.Dst.Descs[r*count : (r+1)*count]
		sShift, dShift := sr.Base-src.Regions[0].Base, dr.Base-dst.Regions[0].Base
		for i := range s0 {
			sOut[i] = nixl.Desc{Addr: s0[i].Addr + sShift, Len: s0[i].Len, DevID: sr.DevID}
			dOut[i] = nixl.Desc{Addr: d0[i].Addr + dShift, Len: d0[i].Len, DevID: dr.DevID}
		}
	}
	return t
}
