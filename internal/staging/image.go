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
	return im, nil
}

// Size returns the image's bytes.
func (im DstImage) Size() uint64 { return uint64(im.Regions) * uint64(im.Blocks) * im.PerBlock }

// Scatter appends the segments that copy the image at slot into the
// destination's blocks dstBlocks (the registration's order).
func (im DstImage) Scatter(segs []Seg, dst *descriptors.Layout, dstBlocks []int, slot uint64) []Seg {
	segs = slices.Grow(segs, len(dst.Regions)*len(dstBlocks))
	bl := dst.BlockLen()
	for r := range dst.Regions {
		base := dst.Regions[r].Base
		for k, b := range dstBlocks {
			segs = appendSeg(segs, Seg{
				Src: slot + (uint64(r)*uint64(im.Blocks)+uint64(k))*im.PerBlock,
				Dst: base + uint64(b)*bl + im.Off,
				Len: im.PerBlock,
			})
		}
	}
	return segs
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

// piece is the part of one mapped pair that lies inside one block of the
// side being walked: its region, block id and offset inside the block, the
// address on the other side, and the length.
type piece struct {
	region, block int32
	off, other, n uint64
}

// walkPieces appends to out the pieces of the pairs of t on side l (the
// source when srcSide), in order. Pairs come region-major with the same
// count per region, as descriptors.MapCoalescedInto returns them. It
// allocates only when out is too small (no closure, no pointer in a piece:
// 131,072 of them for a fragmented 16k request).
func walkPieces(out []piece, t *descriptors.Transfer, l *descriptors.Layout, srcSide bool) ([]piece, error) {
	regions := len(l.Regions)
	if regions == 0 || t.Len()%regions != 0 {
		return out, fmt.Errorf("staging: %d descriptor pairs for %d regions", t.Len(), regions)
	}
	per := t.Len() / regions
	bl, regionLen := l.BlockLen(), l.RegionLen()
	// Block lengths are powers of two in every real cache: shift and mask
	// instead of dividing.
	shift, pow2 := uint(0), bl&(bl-1) == 0
	for pow2 && uint64(1)<<shift < bl {
		shift++
	}
	out = slices.Grow(out[:0], t.Len())
	side, other := t.Src.Descs, t.Dst.Descs
	if !srcSide {
		side, other = other, side
	}
	for i := range side {
		r := i / per
		d := side[i]
		base := l.Regions[r].Base
		if d.Addr < base || d.Addr-base >= regionLen || d.Len > regionLen-(d.Addr-base) {
			return out, fmt.Errorf("staging: descriptor %d (%#x+%d) outside region %d", i, d.Addr, d.Len, r)
		}
		rel, o, left := d.Addr-base, other[i].Addr, d.Len
		for left > 0 {
			var blk, off uint64
			if pow2 {
				blk, off = rel>>shift, rel&(bl-1)
			} else {
				blk, off = rel/bl, rel%bl
			}
			n := min(left, bl-off)
			out = append(out, piece{region: int32(r), block: int32(blk), off: off, other: o, n: n})
			rel, o, left = rel+n, o+n, left-n
		}
	}
	return out, nil
}

// WritePlan is a staged WRITE (push) of one pair: Gather fills the local
// slot, then Local -> Remote moves it (one descriptor per side).
type WritePlan struct {
	Gather        []Seg
	Local, Remote nixl.XferList
	Bytes         uint64
}

// Planner keeps scratch lists between requests. The zero value is ready;
// one Planner serves one goroutine.
type Planner struct {
	pos    []int32
	pieces []piece
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
	p.pieces, err = walkPieces(p.pieces, t, dst, false)
	if err != nil {
		return WritePlan{}, err
	}
	gather := make([]Seg, 0, len(p.pieces))
	for _, pc := range p.pieces {
		k := pos[pc.block]
		if k < 0 || pc.off < im.Off || pc.off+pc.n > im.Off+im.PerBlock {
			return WritePlan{}, fmt.Errorf("staging: destination block %d bytes [%d, %d) outside the image", pc.block, pc.off, pc.off+pc.n)
		}
		img := (uint64(pc.region)*uint64(im.Blocks)+uint64(k))*im.PerBlock + pc.off - im.Off
		gather = appendSeg(gather, Seg{Src: pc.other, Dst: local.Addr + img, Len: pc.n})
	}
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
	segs = slices.Grow(segs, len(src.Regions)*len(srcBlocks))
	bl := src.BlockLen()
	n := uint64(len(srcBlocks))
	for r := range src.Regions {
		base := src.Regions[r].Base
		for k, b := range srcBlocks {
			segs = appendSeg(segs, Seg{Src: base + uint64(b)*bl, Dst: slot + (uint64(r)*n+uint64(k))*bl, Len: bl})
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
	// Each piece: image offset, length, destination address.
	type imgPiece struct{ img, n, dst uint64 }
	p.pieces, err = walkPieces(p.pieces, t, src, true)
	if err != nil {
		return ReadPlan{}, err
	}
	ps := make([]imgPiece, 0, len(p.pieces))
	var runs []Seg // Src: image offset, Len; Dst unused
	lo, hi := ^uint64(0), uint64(0)
	for _, pc := range p.pieces {
		k := pos[pc.block]
		if k < 0 {
			return ReadPlan{}, fmt.Errorf("staging: source block %d is not in the request", pc.block)
		}
		img := (uint64(pc.region)*n+uint64(k))*bl + pc.off
		ps = append(ps, imgPiece{img, pc.n, pc.other})
		if nr := len(runs); nr > 0 && runs[nr-1].Src+runs[nr-1].Len == img {
			runs[nr-1].Len += pc.n
		} else if nr <= MaxRuns {
			runs = append(runs, Seg{Src: img, Len: pc.n})
		}
		lo, hi = min(lo, img), max(hi, img+pc.n)
	}
	if len(ps) == 0 {
		return ReadPlan{}, fmt.Errorf("staging: nothing to read")
	}
	memL, memR := dst.Mem, src.Mem
	devL, devR := dst.Regions[0].DevID, src.Regions[0].DevID
	plan := ReadPlan{Local: nixl.XferList{Mem: memL}, Remote: nixl.XferList{Mem: memR}}
	scatter := make([]Seg, 0, len(ps))
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
		for _, pc := range ps {
			for pc.img < runs[ri].Src || pc.img >= runs[ri].Src+runs[ri].Len {
				ri++
			}
			scatter = appendSeg(scatter, Seg{Src: local.Addr + starts[ri] + pc.img - runs[ri].Src, Dst: pc.dst, Len: pc.n})
		}
		plan.Bytes = at
	} else {
		span := hi - lo
		if span > local.Len {
			return ReadPlan{}, fmt.Errorf("staging: a span of %d bytes does not fit a slot of %d", span, local.Len)
		}
		plan.Local.Descs = append(plan.Local.Descs, nixl.Desc{Addr: local.Addr, Len: span, DevID: devL})
		plan.Remote.Descs = append(plan.Remote.Descs, nixl.Desc{Addr: remote + lo, Len: span, DevID: devR})
		for _, pc := range ps {
			scatter = appendSeg(scatter, Seg{Src: local.Addr + pc.img - lo, Dst: pc.dst, Len: pc.n})
		}
		plan.Bytes = span
	}
	plan.Scatter = scatter
	return plan, nil
}
