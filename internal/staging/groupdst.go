package staging

import (
	"fmt"
	"slices"

	"github.com/gonixl/gonixl/descriptors"
)

// A grouped request (a layout of several KV-cache groups) stages on the
// push path as a group destination image, the grouped DstImage: defined
// by the destination's lists alone, so that decode scatters it without
// knowing prefill's block ids, and laid out as pull's group image is: for
// every group in order that the source rank feeds (descriptors.
// GroupSources) and whose list is not empty, for every region of the
// group, the listed blocks in list order, each region with its own block
// length. What a block holds in the image is the part the source rank
// fills of it:
//
//   - attention (full, sliding window): the heads both ranks hold, every
//     token of each physical block (a logical block of PhysicalPerLogical
//     r is its r physical blocks), one run per block as in DstImage; MLA:
//     the whole block;
//   - SSM: for every state part (the conv sub-projections, the temporal
//     state), the bytes of it both ranks hold: one run per part, the
//     image of a region part-major (part 0 of every slot, then part 1).
//
// A region two groups share is not staged (its blocks would sit in two
// groups' runs of the image). As with DstImage, the source may fill less
// of a listed block than its run: the tail past the request's last token,
// and for a sliding window the destination's tokens before the source's
// list (outside the window); the scatter copies whatever the slot holds
// there into those bytes, which are the destination's (its listed blocks),
// never into a block or a part of one that the image does not name.
type GroupDstImage struct {
	groups  []dstGroup
	group   []int    // by image region: its index in groups
	regions []int    // by image region: its region in the destination layout
	base    []uint64 // by image region, and one past the last: its offset in the image
	index   []int    // by destination region: its image region, -1 for none
}

// dstGroup is one group's part of a GroupDstImage.
type dstGroup struct {
	r0, r1   int    // its image regions
	blocks   []int  // the destination units held, in list order: physical blocks, or state slots for SSM
	units    int    // the units of one region (ids in [0, units))
	blockLen uint64 // bytes of one unit in a region
	runs     []dstRun
	per      uint64 // bytes of one unit in the image: the runs' sum
}

// dstRun is the bytes [off, off+len) of every unit that the source fills;
// unit k's lie at img + k*len from its region's start in the image.
type dstRun struct{ off, len, img uint64 }

// NewGroupDstImage returns the image, for source rank src.TPRank and
// destination rank dst.TPRank, of the destination's lists (one per group
// of dst, as PUSH_REG's local_block_ids carry them).
func NewGroupDstImage(src, dst *descriptors.Layout, lists [][]int) (GroupDstImage, error) {
	sg, dg := src.GroupList(), dst.GroupList()
	if len(lists) != len(dg) || len(sg) != len(dg) {
		return GroupDstImage{}, fmt.Errorf("staging: %d group lists for %d destination groups and %d source groups", len(lists), len(dg), len(sg))
	}
	im := GroupDstImage{index: make([]int, len(dst.Regions)), base: []uint64{0}}
	owner := make([]int, len(dst.Regions))
	for i := range owner {
		owner[i], im.index[i] = -1, -1
	}
	for gi := range dg {
		for _, r := range dg[gi].Regions {
			if r < 0 || r >= len(owner) {
				return GroupDstImage{}, fmt.Errorf("staging: group %d names region %d of %d", gi, r, len(owner))
			}
			if owner[r] >= 0 {
				return GroupDstImage{}, fmt.Errorf("staging: region %d is shared by groups %d and %d: not staged", r, owner[r], gi)
			}
			owner[r] = gi
		}
	}
	for gi := range dg {
		g := &dg[gi]
		if len(lists[gi]) == 0 || len(g.Regions) == 0 {
			continue
		}
		ranks, err := descriptors.GroupSources(src, dst, gi)
		if err != nil {
			return GroupDstImage{}, fmt.Errorf("staging: %w", err)
		}
		if !slices.Contains(ranks, src.TPRank) {
			continue // another source rank writes this group
		}
		part, err := newDstGroup(src, dst, &sg[gi], g, lists[gi])
		if err != nil {
			return GroupDstImage{}, fmt.Errorf("staging: group %d (%s): %w", gi, g.Kind, err)
		}
		if part.per == 0 {
			continue
		}
		part.r0 = len(im.regions)
		stride := uint64(len(part.blocks)) * part.per
		for _, r := range g.Regions {
			im.index[r] = len(im.regions)
			im.regions = append(im.regions, r)
			im.group = append(im.group, len(im.groups))
			im.base = append(im.base, im.base[len(im.base)-1]+stride)
		}
		part.r1 = len(im.regions)
		im.groups = append(im.groups, part)
	}
	return im, nil
}

// newDstGroup lays out one group's units and runs; a is the source's
// group, b the destination's.
func newDstGroup(src, dst *descriptors.Layout, a, b *descriptors.Group, ids []int) (dstGroup, error) {
	ratio := max(b.PhysicalPerLogical, 1)
	r0 := b.Regions[0]
	var out dstGroup
	if b.Kind == descriptors.KindSSM {
		if a.SSM == nil || b.SSM == nil || len(a.SSM.Conv) != len(b.SSM.Conv) {
			return dstGroup{}, fmt.Errorf("SSM state geometries differ")
		}
		out.blocks, out.units = ids, dst.NumBlocks/ratio
		out.blockLen = dst.BlockLenOf(r0) * uint64(ratio)
		out.runs = ssmRuns(src.TPRank, dst.TPRank, a.SSM, b.SSM)
	} else {
		out.blocks, out.units = expandIDs(ids, ratio), dst.NumBlocks
		out.blockLen = dst.BlockLenOf(r0)
		run := dstRun{len: out.blockLen}
		if b.Kind != descriptors.KindMLA {
			bs := b.BlockSize
			if bs == 0 {
				bs = dst.BlockSize
			}
			s0, d0 := src.FirstHead(), dst.FirstHead()
			lo, hi := max(s0, d0), min(s0+src.KVHeads, d0+dst.KVHeads)
			if lo >= hi {
				return dstGroup{}, fmt.Errorf("source rank %d and destination rank %d hold no KV head in common", src.TPRank, dst.TPRank)
			}
			head := uint64(bs) * uint64(dst.HeadBytes)
			run = dstRun{off: uint64(lo-d0) * head, len: uint64(hi-lo) * head}
		}
		if dst.Order == descriptors.OrderNHD && run.len != out.blockLen {
			return dstGroup{}, fmt.Errorf("NHD destination blocks hold a source rank's heads in one run per token, not per block: not staged")
		}
		out.runs = []dstRun{run}
	}
	n := uint64(len(out.blocks))
	for i := range out.runs {
		out.runs[i].img = n * out.per
		out.per += out.runs[i].len
	}
	return out, nil
}

// ssmRuns returns, part by part, the bytes of destination rank d's state
// page that source rank s fills: a part of P model bytes is split over the
// TP ranks in order (rank r of TP t holds [r*P/t, (r+1)*P/t)), so the two
// ranks share at most one run of it (descriptors.SSMState).
func ssmRuns(s, d int, a, b *descriptors.SSMState) []dstRun {
	var out []dstRun
	sPer := append(append([]int(nil), a.Conv...), a.State)
	dPer := append(append([]int(nil), b.Conv...), b.State)
	dOff := 0
	for k := range dPer {
		lo, hi := max(s*sPer[k], d*dPer[k]), min((s+1)*sPer[k], (d+1)*dPer[k])
		if lo < hi {
			out = append(out, dstRun{off: uint64(dOff + lo - d*dPer[k]), len: uint64(hi - lo)})
		}
		dOff += dPer[k]
	}
	return out
}

// expandIDs turns logical block ids into physical ones: b -> b*r .. b*r+r-1.
func expandIDs(ids []int, r int) []int {
	if r == 1 {
		return ids
	}
	out := make([]int, 0, len(ids)*r)
	for _, b := range ids {
		for j := range r {
			out = append(out, b*r+j)
		}
	}
	return out
}

// Size returns the image's bytes.
func (im GroupDstImage) Size() uint64 { return im.base[len(im.base)-1] }

// Regions returns the image's regions: those of the groups it holds.
// Chunks are ranges of them, as of a DstImage's regions.
func (im GroupDstImage) Regions() int { return len(im.regions) }

// Chunks cuts the image into n chunks of whole regions (n from
// ChunkCount(im.Regions(), ...)); both sides compute the same ones from
// the image alone. A chunk that holds no region is left out.
func (im GroupDstImage) Chunks(n int) []Chunk {
	regions := im.Regions()
	if regions == 0 {
		return nil
	}
	out := make([]Chunk, 0, n)
	for c := range n {
		r0, r1 := ChunkRegions(regions, n, c)
		if r0 == r1 {
			continue
		}
		out = append(out, Chunk{R0: r0, R1: r1, Off: im.base[r0], Len: im.base[r1] - im.base[r0]})
	}
	return out
}

// RegionCopy is one block copy of a grouped image's gather or scatter,
// covering the image's regions [R0, R0+len(Bases)).
type RegionCopy struct {
	R0 int
	BlockCopy
}

// ScatterBlocks returns the scatter of the image at slot into the
// destination's listed blocks: one block copy per group and run (one run
// for attention, one per state part for SSM).
func (im GroupDstImage) ScatterBlocks(dst *descriptors.Layout, slot uint64) []RegionCopy {
	var out []RegionCopy
	for _, g := range im.groups {
		bases := make([]uint64, 0, g.r1-g.r0)
		for _, r := range im.regions[g.r0:g.r1] {
			bases = append(bases, dst.Regions[r].Base)
		}
		for _, rn := range g.runs {
			out = append(out, RegionCopy{R0: g.r0, BlockCopy: BlockCopy{Bases: bases, Blocks: g.blocks, BlockLen: g.blockLen,
				Off: rn.off, Len: rn.len, Slot: slot + im.base[g.r0] + rn.img, SlotStride: uint64(len(g.blocks)) * g.per}})
		}
	}
	return out
}

// ChunkCopies returns the parts of copies that cover the image's regions
// [r0, r1): chunk [r0, r1)'s share of a grouped gather or scatter.
func ChunkCopies(copies []RegionCopy, r0, r1 int) []BlockCopy {
	var out []BlockCopy
	for _, c := range copies {
		a, b := max(r0, c.R0)-c.R0, min(r1, c.R0+len(c.Bases))-c.R0
		if a < b {
			out = append(out, c.Regions(a, b))
		}
	}
	return out
}
