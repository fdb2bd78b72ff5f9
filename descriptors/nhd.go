package descriptors

import "github.com/gonixl/gonixl/nixl"

// walkTokens is walk when a side is NHD (token-major blocks) and the plain
// walk's unit runs are not contiguous there: across TP sizes (a rank's
// heads are a run of each token, not of the block), across block sizes,
// and between an NHD and an HND side, where the bytes must be permuted.
// It cuts the request into pieces of one token and, when both sides are
// NHD, all moved heads (contiguous on both), else one head; NIXL then
// permutes by where each piece lands, so the destination receives its own
// order without a pass over the data afterwards. That is correct for every
// pair, at one descriptor per token and head before merging (a 16-token
// block of 8 heads is 128 pieces); merging restores long runs wherever both
// sides continue, for instance a single head, or NHD on both sides.
//
// Pieces run destination block by destination block; inside one, token by
// token for an NHD destination, head by head for an HND one, so that the
// destination side is written in memory order. Without merge, pieces are
// still merged inside one (source block, destination block) pair, so that
// each pair lies inside one block on each side as MapRequest promises.
func (p *plan) walkTokens(merge bool, srcOut, dstOut []nixl.Desc) int {
	src, dst := p.src, p.dst
	hb := uint64(src.HeadBytes)
	run := 1
	if src.nhd() && dst.nhd() {
		run = p.heads
	}
	w := pairWriter{merge: merge, src: srcOut, dst: dstOut,
		srcDev: src.Regions[0].DevID, dstDev: dst.Regions[0].DevID, len: uint64(run) * hb}
	ut := p.unitTokens
	firstTok, endTok := p.first*ut, p.end*ut
	sStart, dStart := p.srcStart*ut, p.dstStart*ut
	sBase, dBase := src.Regions[0].Base, dst.Regions[0].Base
	sBL, dBL := src.BlockLen(), dst.BlockLen()
	// at returns the address of token T, head h (counted from the moved
	// heads) on one side, and the block id holding it.
	at := func(l *Layout, base, blockLen uint64, ids []int, start, head0, T, h int) (uint64, int) {
		k, t := (T-start)/l.BlockSize, (T-start)%l.BlockSize
		b := ids[k]
		off := uint64(b) * blockLen
		if l.nhd() {
			off += uint64(t*l.KVHeads+head0+h) * hb
		} else {
			off += uint64((head0+h)*l.BlockSize+t) * hb
		}
		return base + off, b
	}
	put := func(T, h int) {
		s, sb := at(src, sBase, sBL, p.srcBlocks, sStart, p.srcHead, T, h)
		d, db := at(dst, dBase, dBL, p.dstBlocks, dStart, p.dstHead, T, h)
		w.putIn(s, d, sb, db)
	}
	for t0 := firstTok; t0 < endTok; {
		t1 := min(endTok, dStart+((t0-dStart)/dst.BlockSize+1)*dst.BlockSize)
		if dst.nhd() {
			for T := t0; T < t1; T++ {
				for h := 0; h < p.heads; h += run {
					put(T, h)
				}
			}
		} else {
			for h := 0; h < p.heads; h += run {
				for T := t0; T < t1; T++ {
					put(T, h)
				}
			}
		}
		t0 = t1
	}
	return w.n
}

// putIn is put for pieces of the blocks sb (source) and db (destination):
// without merge it still extends the last pair when that lies in the same
// two blocks.
func (w *pairWriter) putIn(s, d uint64, sb, db int) {
	same := w.n > 0 && sb == w.lastSrcBlock && db == w.lastDstBlock
	w.lastSrcBlock, w.lastDstBlock = sb, db
	if w.merge || !same {
		w.put(s, d)
		return
	}
	w.merge = true
	w.put(s, d)
	w.merge = false
}
