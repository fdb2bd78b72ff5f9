package descriptors

import "github.com/gonixl/gonixl/nixl"

// ssmPlan is one SSM group's part of a request between one source rank and
// one destination rank: which slots pair up and, inside a slot's page, the
// runs of state both ranks hold.
type ssmPlan struct {
	src, dst           *Layout
	srcRegions         []Region
	dstRegions         []Region
	srcPage, dstPage   uint64
	pieces             []ssmPiece
	srcSlots, dstSlots []int // paired by index
}

// ssmPiece is one run of a part: its offsets in each side's page.
type ssmPiece struct{ srcOff, dstOff, len uint64 }

// newSSMPlan pairs the slots from the end of the lists and cuts each part
// to the bytes both ranks hold. A part of P bytes over the model is split
// over TP ranks in order (rank r of TP t holds [r*P/t, (r+1)*P/t)), so the
// two ranks share at most one run of it; it is empty when the ranks' shares
// do not overlap.
func newSSMPlan(gi int, src, dst *Layout, a, b *Group, srcIDs, dstIDs []int) (*ssmPlan, error) {
	if len(dstIDs) > len(srcIDs) {
		return nil, invalidf("Groups[%d] (ssm): destination lists %d state slots, the source %d: every destination slot needs the source's",
			gi, len(dstIDs), len(srcIDs))
	}
	sp := &ssmPlan{src: src, dst: dst, srcPage: uint64(a.SSM.page()), dstPage: uint64(b.SSM.page()),
		srcSlots: srcIDs[len(srcIDs)-len(dstIDs):], dstSlots: dstIDs}
	for _, r := range a.Regions {
		sp.srcRegions = append(sp.srcRegions, src.Regions[r])
	}
	for _, r := range b.Regions {
		sp.dstRegions = append(sp.dstRegions, dst.Regions[r])
	}
	sParts, dParts := a.SSM.parts(), b.SSM.parts()
	s, d := src.TPRank, dst.TPRank
	for k := range sParts {
		sOff, sPer := sParts[k][0], sParts[k][1]
		dOff, dPer := dParts[k][0], dParts[k][1]
		lo, hi := max(s*sPer, d*dPer), min((s+1)*sPer, (d+1)*dPer)
		if lo < hi {
			sp.pieces = append(sp.pieces, ssmPiece{srcOff: uint64(sOff + lo - s*sPer), dstOff: uint64(dOff + lo - d*dPer), len: uint64(hi - lo)})
		}
	}
	if n := len(sp.dstSlots) * len(sp.pieces); n > MaxPairs/len(sp.srcRegions) {
		return nil, invalidf("Groups[%d] (ssm): request needs %d slots x %d parts x %d regions descriptor pairs, more than MaxPairs %d",
			gi, len(sp.dstSlots), len(sp.pieces), len(sp.srcRegions), MaxPairs)
	}
	return sp, nil
}

// build returns the uncoalesced pairs, slot by slot and part by part in
// each region in order, and the pairs per region.
func (sp *ssmPlan) build() (Transfer, int) {
	chunk := len(sp.dstSlots) * len(sp.pieces)
	total := chunk * len(sp.srcRegions)
	all := make([]nixl.Desc, 2*total)
	t := Transfer{
		Src: nixl.XferList{Mem: sp.src.Mem, Descs: all[:total:total]},
		Dst: nixl.XferList{Mem: sp.dst.Mem, Descs: all[total:]},
	}
	i := 0
	for r := range sp.srcRegions {
		sr, dr := sp.srcRegions[r], sp.dstRegions[r]
		for k, ss := range sp.srcSlots {
			sBase := sr.Base + uint64(ss)*sp.srcPage
			dBase := dr.Base + uint64(sp.dstSlots[k])*sp.dstPage
			for _, pc := range sp.pieces {
				t.Src.Descs[i] = nixl.Desc{Addr: sBase + pc.srcOff, Len: pc.len, DevID: sr.DevID}
				t.Dst.Descs[i] = nixl.Desc{Addr: dBase + pc.dstOff, Len: pc.len, DevID: dr.DevID}
				t.Bytes += pc.len
				i++
			}
		}
	}
	return t, chunk
}
