package staging

import (
	"fmt"
	"slices"

	"github.com/gonixl/gonixl/descriptors"
)

// PlanWriteGroups is PlanWrite for a grouped request: t are the mapped
// pairs of every group (descriptors.MapGroupsInto, source layout src onto
// destination layout dst), im the destination's image of the pair, which
// the WRITE moves through the local slot into the peer's slot at remote.
// Every destination byte of t must lie in the image.
func (p *Planner) PlanWriteGroups(t *descriptors.Transfer, src, dst *descriptors.Layout, im GroupDstImage, local Slot, remote uint64) (WritePlan, error) {
	size := im.Size()
	switch {
	case size == 0:
		return WritePlan{}, fmt.Errorf("staging: the image is empty")
	case size > local.Len:
		return WritePlan{}, fmt.Errorf("staging: image of %d bytes does not fit a slot of %d", size, local.Len)
	case len(t.Dst.Descs) != len(t.Src.Descs):
		return WritePlan{}, fmt.Errorf("staging: %d source and %d destination descriptors", len(t.Src.Descs), len(t.Dst.Descs))
	}
	pos := make([][]int32, len(im.groups))
	for gi, g := range im.groups {
		var err error
		if pos[gi], err = positions(nil, g.blocks, g.units); err != nil {
			return WritePlan{}, err
		}
	}
	gather := slices.Grow(p.gather[:0], t.Len())
	r := -1
	for i, d := range t.Dst.Descs {
		if r < 0 || d.Addr < dst.Regions[r].Base || d.Addr-dst.Regions[r].Base >= dst.RegionLenOf(r) {
			r = regionOf(dst, d.Addr)
		}
		if r < 0 || im.index[r] < 0 {
			return WritePlan{}, fmt.Errorf("staging: destination descriptor %d (%#x+%d) in no region of the image", i, d.Addr, d.Len)
		}
		ir := im.index[r]
		g, gp := &im.groups[im.group[ir]], pos[im.group[ir]]
		rel := d.Addr - dst.Regions[r].Base
		if d.Len > dst.RegionLenOf(r)-rel {
			return WritePlan{}, fmt.Errorf("staging: destination descriptor %d (%#x+%d) outside region %d", i, d.Addr, d.Len, r)
		}
		whole := len(g.runs) == 1 && g.runs[0].off == 0 && g.runs[0].len == g.blockLen
		s, left := t.Src.Descs[i].Addr, d.Len
		for left > 0 {
			blk, off := rel/g.blockLen, rel%g.blockLen
			if blk >= uint64(len(gp)) || gp[blk] < 0 {
				return WritePlan{}, fmt.Errorf("staging: destination block %d of region %d is not in the image", blk, r)
			}
			k := gp[blk]
			ri := slices.IndexFunc(g.runs, func(rn dstRun) bool { return off >= rn.off && off < rn.off+rn.len })
			if ri < 0 {
				return WritePlan{}, fmt.Errorf("staging: byte %d of destination block %d of region %d is outside the image", off, blk, r)
			}
			rn := g.runs[ri]
			n := min(left, rn.off+rn.len-off)
			if whole && off == 0 {
				// Whole blocks that follow each other in the image too.
				for j := uint64(1); n+g.blockLen <= left && blk+j < uint64(len(gp)) && gp[blk+j] == k+int32(j); j++ {
					n += g.blockLen
				}
			}
			img := im.base[ir] + rn.img + uint64(k)*rn.len + off - rn.off
			gather = appendSeg(gather, Seg{Src: s, Dst: local.Addr + img, Len: n})
			rel, s, left = rel+n, s+n, left-n
		}
	}
	p.gather = gather
	return WritePlan{Gather: gather, Local: nixlList(src, local.Addr, size), Remote: nixlList(dst, remote, size), Bytes: size}, nil
}
