package staging

import (
	"fmt"
	"slices"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// DstImage is the staging image of one (source rank, destination rank)
// pair on the push path, defined by the destination alone so that decode
// can scatter it without knowing prefill's block ids: for every region and
// every destination block (in the registration's order), the byte range
// [Off, Off+PerBlock) of the block that the source rank fills. HND blocks
// make that range one run per block whatever the TP sizes and block sizes:
// a source rank fills the heads both ranks hold, for every token of the
// block. Block (region r, k-th block) sits at (r*Blocks+k)*PerBlock.
//
// When the request ends inside the destination's last block and the
// source's blocks are smaller, part of that block's range is not filled
// by the source: the scatter copies whatever the slot holds there into the
// block's padding tail, which the destination owns (see
// descriptors.Request).
type DstImage struct {
	Off, PerBlock   uint64
	Regions, Blocks int
}

// NewDstImage returns the image of blocks destination blocks for the pair.
func NewDstImage(src, dst *descriptors.Layout, blocks int) (DstImage, error) {
	if len(src.Regions) != len(dst.Regions) {
		return DstImage{}, fmt.Errorf("staging: source has %d regions, destination %d", len(src.Regions), len(dst.Regions))
	}
	im := DstImage{Regions: len(dst.Regions), Blocks: blocks, PerBlock: dst.BlockLen()}
	if !dst.MLA {
		s0, d0 := src.FirstHead(), dst.FirstHead()
		lo, hi := max(s0, d0), min(s0+src.KVHeads, d0+dst.KVHeads)
		if lo >= hi {
			return DstImage{}, fmt.Errorf("staging: source rank %d and destination rank %d hold no KV head in common", src.TPRank, dst.TPRank)
		}
		head := uint64(dst.BlockSize) * uint64(dst.HeadBytes)
		im.Off, im.PerBlock = uint64(lo-d0)*head, uint64(hi-lo)*head
	}
	if dst.Order == descriptors.OrderNHD && im.PerBlock != dst.BlockLen() {
		return DstImage{}, fmt.Errorf("staging: NHD destination blocks hold a source rank's heads in one run per token, not per block: not staged")
	}
	return im, nil
}

// Size returns the image's bytes.
func (im DstImage) Size() uint64 { return uint64(im.Regions) * uint64(im.Blocks) * im.PerBlock }

// Scatter appends the segments that copy the image at slot into the
// destination's blocks dstBlocks (the registration's order).
func (im DstImage) Scatter(segs []Seg, dst *descriptors.Layout, dstBlocks []int, slot uint64) []Seg {
	bl := dst.BlockLen()
	whole := im.Off == 0 && im.PerBlock == bl
	rs := blockRuns(dstBlocks, whole)
	segs = slices.Grow(segs, len(dst.Regions)*len(rs))
	for r := range dst.Regions {
		base := dst.Regions[r].Base
		for _, rn := range rs {
			segs = appendSeg(segs, Seg{
				Src: slot + (uint64(r)*uint64(im.Blocks)+uint64(rn.k))*im.PerBlock,
				Dst: base + uint64(dstBlocks[rn.k])*bl + im.Off,
				Len: uint64(rn.n) * im.PerBlock,
			})
		}
	}
	return segs
}

// blockRun is n blocks of a list from index k whose ids follow each other.
type blockRun struct{ k, n int }

// blockRuns cuts ids into runs of consecutive ids (when merge; else one
// block each), so that a contiguous request costs one segment per run and
// region instead of one per block.
func blockRuns(ids []int, merge bool) []blockRun {
	out := make([]blockRun, 0, len(ids))
	for k := 0; k < len(ids); {
		n := 1
		for merge && k+n < len(ids) && ids[k+n] == ids[k]+n {
			n++
		}
		out = append(out, blockRun{k, n})
		k += n
	}
	return out
}

// positions returns, for every block id of a layout of numBlocks blocks,
// its index in ids (-1 when absent); an id out of range or repeated gives
// an error (a repeated source block cannot be told apart in an image).
func positions(buf []int32, ids []int, numBlocks int) ([]int32, error) {
	if cap(buf) < numBlocks {
		buf = make([]int32, numBlocks)
	}
	buf = buf[:numBlocks]
	for i := range buf {
		buf[i] = -1
	}
	for k, b := range ids {
		if b < 0 || b >= numBlocks {
			return buf, fmt.Errorf("staging: block id %d out of range [0, %d)", b, numBlocks)
		}
		if buf[b] >= 0 {
			return buf, fmt.Errorf("staging: block id %d appears twice", b)
		}
		buf[b] = int32(k)
	}
	return buf, nil
}

// blockSplitter finds the block of an offset inside a region: by shift
// and mask for the power-of-two block lengths of every real cache, else by
// division.
type blockSplitter struct {
	bl    uint64
	shift uint
	pow2  bool
}

func newBlockSplitter(bl uint64) blockSplitter {
	s := blockSplitter{bl: bl, pow2: bl&(bl-1) == 0}
	for s.pow2 && uint64(1)<<s.shift < bl {
		s.shift++
	}
	return s
}

func (s blockSplitter) split(rel uint64) (block, off uint64) {
	if s.pow2 {
		return rel >> s.shift, rel & (s.bl - 1)
	}
	return rel / s.bl, rel % s.bl
}

// checkPairs checks that t's pairs come region-major with the same count
// per region on layout l, as descriptors.MapCoalescedInto returns them,
// and returns the count per region.
func checkPairs(t *descriptors.Transfer, l *descriptors.Layout) (int, error) {
	regions := len(l.Regions)
	if regions == 0 || t.Len()%regions != 0 || len(t.Dst.Descs) != len(t.Src.Descs) {
		return 0, fmt.Errorf("staging: %d descriptor pairs for %d regions", t.Len(), regions)
	}
	return t.Len() / regions, nil
}

// WritePlan is a staged WRITE (push) of one pair: Gather fills the local
// slot, then Local -> Remote moves it (one descriptor per side). Gather is
// the Planner's scratch: valid until its next PlanWrite.
type WritePlan struct {
	Gather        []Seg
	Local, Remote nixl.XferList
	Bytes         uint64
}

// Planner keeps scratch lists between requests. The zero value is ready;
// one Planner serves one goroutine.
type Planner struct {
	pos    []int32
	gather []Seg
}

// PlanWrite builds the staged WRITE of the mapped pairs t (source layout
// src onto destination layout dst, as descriptors.MapCoalescedInto gave
// them) into the image im of a peer slot at remote (device remoteDev),
// through the local slot.
func (p *Planner) PlanWrite(t *descriptors.Transfer, src, dst *descriptors.Layout, dstBlocks []int, im DstImage, local Slot, remote uint64) (WritePlan, error) {
	size := im.Size()
	if size > local.Len {
		return WritePlan{}, fmt.Errorf("staging: image of %d bytes does not fit a slot of %d", size, local.Len)
	}
	pos, err := positions(p.pos, dstBlocks, dst.NumBlocks)
	p.pos = pos
	if err != nil {
		return WritePlan{}, err
	}
	per, err := checkPairs(t, dst)
	if err != nil {
		return WritePlan{}, err
	}
	sp, regionLen := newBlockSplitter(dst.BlockLen()), dst.RegionLen()
	whole := im.Off == 0 && im.PerBlock == sp.bl
	gather := slices.Grow(p.gather[:0], t.Len())
	for i, d := range t.Dst.Descs {
		r := i / per
		base := dst.Regions[r].Base
		if d.Addr < base || d.Addr-base >= regionLen || d.Len > regionLen-(d.Addr-base) {
			return WritePlan{}, fmt.Errorf("staging: destination descriptor %d (%#x+%d) outside region %d", i, d.Addr, d.Len, r)
		}
		rel, src, left := d.Addr-base, t.Src.Descs[i].Addr, d.Len
		for left > 0 {
			blk, off := sp.split(rel)
			n := min(left, sp.bl-off)
			k := pos[blk]
			if k < 0 || off < im.Off || off+n > im.Off+im.PerBlock {
				return WritePlan{}, fmt.Errorf("staging: destination block %d bytes [%d, %d) outside the image", blk, off, off+n)
			}
			if off == 0 && whole {
				// Whole blocks that follow each other in the image too:
				// one segment.
				for j := uint64(1); n+sp.bl <= left && pos[blk+j] == k+int32(j); j++ {
					n += sp.bl
				}
			}
			img := (uint64(r)*uint64(im.Blocks)+uint64(k))*im.PerBlock + off - im.Off
			gather = appendSeg(gather, Seg{Src: src, Dst: local.Addr + img, Len: n})
			rel, src, left = rel+n, src+n, left-n
		}
	}
	p.gather = gather
	return WritePlan{
		Gather: gather,
		Local:  nixl.XferList{Mem: src.Mem, Descs: []nixl.Desc{{Addr: local.Addr, Len: size, DevID: src.Regions[0].DevID}}},
		Remote: nixl.XferList{Mem: dst.Mem, Descs: []nixl.Desc{{Addr: remote, Len: size, DevID: dst.Regions[0].DevID}}},
		Bytes:  size,
	}, nil
}

// SrcImageSize is the size of the pull image of blocks source blocks:
// every region's blocks, whole, in the request's order.
func SrcImageSize(src *descriptors.Layout, blocks int) uint64 {
	return uint64(len(src.Regions)) * uint64(blocks) * src.BlockLen()
}

// SrcGather appends the segments that gather the source blocks srcBlocks
// of src, whole, into the pull image at slot: region r's k-th block at
// (r*len(srcBlocks)+k)*BlockLen.
func SrcGather(segs []Seg, src *descriptors.Layout, srcBlocks []int, slot uint64) []Seg {
	bl := src.BlockLen()
	n := uint64(len(srcBlocks))
	rs := blockRuns(srcBlocks, true)
	segs = slices.Grow(segs, len(src.Regions)*len(rs))
	for r := range src.Regions {
		base := src.Regions[r].Base
		for _, rn := range rs {
			segs = appendSeg(segs, Seg{Src: base + uint64(srcBlocks[rn.k])*bl, Dst: slot + (uint64(r)*n+uint64(rn.k))*bl, Len: uint64(rn.n) * bl})
		}
	}
	return segs
}

// ReadPlan is a staged READ (pull) of one pair: Local <- Remote moves the
// needed parts of the peer's image into the local slot, then Scatter
// copies them into the destination blocks.
type ReadPlan struct {
	Local, Remote nixl.XferList
	Scatter       []Seg
	Bytes         uint64 // bytes read (a span may read more than it needs)
}

// MaxRuns is how many separate runs of a peer's image a staged READ reads
// before it reads the whole span instead (more bytes, one descriptor).
const MaxRuns = 16

// PlanRead builds the staged READ of the mapped pairs t (the peer's layout
// src onto the local layout dst, as descriptors.MapCoalescedInto gave
// them) from the peer's image of srcBlocks at remote into the local slot.
func (p *Planner) PlanRead(t *descriptors.Transfer, src, dst *descriptors.Layout, srcBlocks []int, remote uint64, local Slot) (ReadPlan, error) {
	pos, err := positions(p.pos, srcBlocks, src.NumBlocks)
	p.pos = pos
	if err != nil {
		return ReadPlan{}, err
	}
	bl, n := src.BlockLen(), uint64(len(srcBlocks))
	per, err := checkPairs(t, src)
	if err != nil {
		return ReadPlan{}, err
	}
	sp, regionLen := newBlockSplitter(bl), src.RegionLen()
	// First pass: the scatter with each Src an offset in the peer's image,
	// and the runs of the image it reads.
	scatter := make([]Seg, 0, t.Len())
	var runs []Seg // Src: image offset, Len; Dst unused
	lo, hi := ^uint64(0), uint64(0)
	for i, d := range t.Src.Descs {
		r := i / per
		base := src.Regions[r].Base
		if d.Addr < base || d.Addr-base >= regionLen || d.Len > regionLen-(d.Addr-base) {
			return ReadPlan{}, fmt.Errorf("staging: source descriptor %d (%#x+%d) outside region %d", i, d.Addr, d.Len, r)
		}
		rel, dstAddr, left := d.Addr-base, t.Dst.Descs[i].Addr, d.Len
		for left > 0 {
			blk, off := sp.split(rel)
			ln := min(left, bl-off)
			k := pos[blk]
			if k < 0 {
				return ReadPlan{}, fmt.Errorf("staging: source block %d is not in the request", blk)
			}
			if off == 0 {
				// Whole blocks that follow each other in the image too.
				for j := uint64(1); ln+bl <= left && pos[blk+j] == k+int32(j); j++ {
					ln += bl
				}
			}
			img := (uint64(r)*n+uint64(k))*bl + off
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

// finishRead builds a staged READ from its scatter (each Src an offset in
// the peer's image), the runs of the image it reads (at most MaxRuns+1)
// and the span [lo, hi) they cover.
func finishRead(scatter, runs []Seg, lo, hi uint64, src, dst *descriptors.Layout, remote uint64, local Slot) (ReadPlan, error) {
	if len(scatter) == 0 {
		return ReadPlan{}, fmt.Errorf("staging: nothing to read")
	}
	memL, memR := dst.Mem, src.Mem
	devL, devR := dst.Regions[0].DevID, src.Regions[0].DevID
	plan := ReadPlan{Local: nixl.XferList{Mem: memL}, Remote: nixl.XferList{Mem: memR}}
	if len(runs) <= MaxRuns {
		// Runs land back to back in the local slot.
		var at uint64
		starts := make([]uint64, len(runs))
		for i, rn := range runs {
			starts[i] = at
			at += rn.Len
		}
		if at > local.Len {
			return ReadPlan{}, fmt.Errorf("staging: %d bytes to read do not fit a slot of %d", at, local.Len)
		}
		for i, rn := range runs {
			plan.Local.Descs = append(plan.Local.Descs, nixl.Desc{Addr: local.Addr + starts[i], Len: rn.Len, DevID: devL})
			plan.Remote.Descs = append(plan.Remote.Descs, nixl.Desc{Addr: remote + rn.Src, Len: rn.Len, DevID: devR})
		}
		ri := 0
		for i := range scatter {
			sc := &scatter[i]
			for sc.Src < runs[ri].Src || sc.Src >= runs[ri].Src+runs[ri].Len {
				ri++
			}
			sc.Src = local.Addr + starts[ri] + sc.Src - runs[ri].Src
		}
		plan.Bytes = at
	} else {
		span := hi - lo
		if span > local.Len {
			return ReadPlan{}, fmt.Errorf("staging: a span of %d bytes does not fit a slot of %d", span, local.Len)
		}
		plan.Local.Descs = append(plan.Local.Descs, nixl.Desc{Addr: local.Addr, Len: span, DevID: devL})
		plan.Remote.Descs = append(plan.Remote.Descs, nixl.Desc{Addr: remote + lo, Len: span, DevID: devR})
		for i := range scatter {
			scatter[i].Src = local.Addr + scatter[i].Src - lo
		}
		plan.Bytes = span
	}
	plan.Scatter = scatter
	return plan, nil
}

// nixlList is one descriptor of n bytes at addr in l's memory.
func nixlList(l *descriptors.Layout, addr, n uint64) nixl.XferList {
	return nixl.XferList{Mem: l.Mem, Descs: []nixl.Desc{{Addr: addr, Len: n, DevID: l.Regions[0].DevID}}}
}
