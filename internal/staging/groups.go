package staging

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
)

// A grouped request (a layout of several KV-cache groups) stages on the
// pull path as a group image: for every group in order, for every region
// of the group, the group's listed logical blocks whole, in list order
// (a logical block is PhysicalPerLogical physical blocks back to back in
// its region; an SSM group's block is a state slot). Regions of a grouped
// layout differ in block length (Layout.BlockLenOf), so every region has
// its own stride; a region two groups share is not staged (its blocks
// would sit in the image twice).

// groupImage is where the regions of a grouped layout's request sit in
// its image.
type groupImage struct {
	group []int    // by region: its group, -1 for a region no group names
	base  []uint64 // by region: its first block's offset in the image
	lbl   []uint64 // by region: bytes of one logical block
	size  uint64
}

// newGroupImage lays out the image of lists on l.
func newGroupImage(l *descriptors.Layout, lists [][]int) (groupImage, error) {
	gs := l.GroupList()
	if len(lists) != len(gs) {
		return groupImage{}, fmt.Errorf("staging: %d group lists for %d groups", len(lists), len(gs))
	}
	im := groupImage{group: make([]int, len(l.Regions)), base: make([]uint64, len(l.Regions)), lbl: make([]uint64, len(l.Regions))}
	for i := range im.group {
		im.group[i] = -1
	}
	for gi, g := range gs {
		for _, r := range g.Regions {
			if im.group[r] >= 0 {
				return groupImage{}, fmt.Errorf("staging: region %d is shared by groups %d and %d: not staged", r, im.group[r], gi)
			}
			im.group[r], im.base[r] = gi, im.size
			im.lbl[r] = l.BlockLenOf(r) * uint64(max(g.PhysicalPerLogical, 1))
			im.size += uint64(len(lists[gi])) * im.lbl[r]
		}
	}
	return im, nil
}

// GroupImageSize is the size of the pull image of a grouped request whose
// lists (one per group of src) are lists.
func GroupImageSize(src *descriptors.Layout, lists [][]int) (uint64, error) {
	im, err := newGroupImage(src, lists)
	return im.size, err
}

// GroupGatherBlocks returns the gathers, one per group, of lists on src
// into the group image at slot, as block copies (the GPU copier computes
// the addresses from the ids).
func GroupGatherBlocks(src *descriptors.Layout, lists [][]int, slot uint64) ([]BlockCopy, error) {
	im, err := newGroupImage(src, lists)
	if err != nil {
		return nil, err
	}
	var out []BlockCopy
	for gi, g := range src.GroupList() {
		if len(lists[gi]) == 0 || len(g.Regions) == 0 {
			continue
		}
		r0 := g.Regions[0]
		bc := BlockCopy{Blocks: lists[gi], BlockLen: im.lbl[r0], Len: im.lbl[r0], Slot: slot + im.base[r0],
			SlotStride: uint64(len(lists[gi])) * im.lbl[r0], ToSlot: true}
		for _, r := range g.Regions {
			if im.lbl[r] != im.lbl[r0] || im.base[r] != im.base[r0]+uint64(len(bc.Bases))*bc.SlotStride {
				return nil, fmt.Errorf("staging: group %d's regions differ in block length", gi)
			}
			bc.Bases = append(bc.Bases, src.Regions[r].Base)
		}
		out = append(out, bc)
	}
	return out, nil
}

// PlanReadGroups is PlanRead for a grouped request: t are the mapped
// pairs of every group (descriptors.MapGroupsInto), srcLists the peer's
// lists, whose group image (GroupGatherBlocks) lies at remote.
func (p *Planner) PlanReadGroups(t *descriptors.Transfer, src, dst *descriptors.Layout, srcLists [][]int, remote uint64, local Slot) (ReadPlan, error) {
	im, err := newGroupImage(src, srcLists)
	if err != nil {
		return ReadPlan{}, err
	}
	gs := src.GroupList()
	pos := make([][]int32, len(gs)) // by group: logical block -> index in its list
	for gi, g := range gs {
		if pos[gi], err = positions(nil, srcLists[gi], src.NumBlocks/max(g.PhysicalPerLogical, 1)); err != nil {
			return ReadPlan{}, err
		}
	}
	scatter := make([]Seg, 0, t.Len())
	var runs []Seg
	lo, hi := ^uint64(0), uint64(0)
	for i, d := range t.Src.Descs {
		r := regionOf(src, d.Addr)
		if r < 0 || im.group[r] < 0 {
			return ReadPlan{}, fmt.Errorf("staging: source descriptor %d (%#x+%d) in no group's region", i, d.Addr, d.Len)
		}
		base, lbl, gp := src.Regions[r].Base, im.lbl[r], pos[im.group[r]]
		if d.Len > src.RegionLenOf(r)-(d.Addr-base) {
			return ReadPlan{}, fmt.Errorf("staging: source descriptor %d (%#x+%d) outside region %d", i, d.Addr, d.Len, r)
		}
		rel, dstAddr, left := d.Addr-base, t.Dst.Descs[i].Addr, d.Len
		for left > 0 {
			blk, off := rel/lbl, rel%lbl
			ln := min(left, lbl-off)
			if blk >= uint64(len(gp)) || gp[blk] < 0 {
				return ReadPlan{}, fmt.Errorf("staging: source block %d of region %d is not in the request", blk, r)
			}
			k := gp[blk]
			if off == 0 {
				for j := uint64(1); ln+lbl <= left && blk+j < uint64(len(gp)) && gp[blk+j] == k+int32(j); j++ {
					ln += lbl
				}
			}
			img := im.base[r] + uint64(k)*lbl + off
			scatter = appendSeg(scatter, Seg{Src: img, Dst: dstAddr, Len: ln})
			if nr := len(runs); nr > 0 && runs[nr-1].Src+runs[nr-1].Len == img {
				runs[nr-1].Len += ln
			} else if nr <= MaxRuns {
				runs = append(runs, Seg{Src: img, Len: ln})
			}
			lo, hi = min(lo, img), max(hi, img+ln)
			rel, dstAddr, left = rel+ln, dstAddr+ln, left-ln
		}
	}
	return finishRead(scatter, runs, lo, hi, src, dst, remote, local)
}

// regionOf returns the region of l holding addr, -1 for none.
func regionOf(l *descriptors.Layout, addr uint64) int {
	for i, r := range l.Regions {
		if addr >= r.Base && addr-r.Base < l.RegionLenOf(i) {
			return i
		}
	}
	return -1
}
