package staging

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// BlockCopy is a gather or scatter given by block ids instead of a list
// of segments, so that the copier computes the addresses itself (the GPU
// kernel does, from a few kilobytes of ids, where a segment list of a
// fragmented 16k-token request is 3 MiB built on the CPU). Item (r, j),
// for every region r and every j < len(Blocks), is the block run
//
//	Bases[r] + Blocks[j]*BlockLen + Off, Len bytes
//
// and the slot run
//
//	Slot + r*SlotStride + j*Len.
//
// ToSlot copies blocks into the slot (a gather), else the slot into the
// blocks (a scatter).
type BlockCopy struct {
	Bases      []uint64
	Blocks     []int
	BlockLen   uint64
	Off, Len   uint64
	Slot       uint64
	SlotStride uint64
	ToSlot     bool
}

// BlockCopier is a Copier that also copies by block ids. HostCopier and
// the GPU copier are.
type BlockCopier interface {
	Copier
	CopyBlocks(BlockCopy) error
}

// Segs returns the copy as segments, consecutive blocks merged.
func (b BlockCopy) Segs(segs []Seg) []Seg {
	merge := b.Off == 0 && b.Len == b.BlockLen
	rs := blockRuns(b.Blocks, merge)
	for r, base := range b.Bases {
		for _, rn := range rs {
			blk := base + uint64(b.Blocks[rn.k])*b.BlockLen + b.Off
			sl := b.Slot + uint64(r)*b.SlotStride + uint64(rn.k)*b.Len
			s := Seg{Src: blk, Dst: sl, Len: uint64(rn.n) * b.Len}
			if !b.ToSlot {
				s.Src, s.Dst = sl, blk
			}
			segs = appendSeg(segs, s)
		}
	}
	return segs
}

// Bytes returns the bytes the copy moves.
func (b BlockCopy) Bytes() uint64 { return uint64(len(b.Bases)) * uint64(len(b.Blocks)) * b.Len }

// CopyBlocks copies by segments.
func (HostCopier) CopyBlocks(b BlockCopy) error { return HostCopier{}.Copy(b.Segs(nil)) }

// Bases returns the region bases of a layout.
func Bases(l *descriptors.Layout) []uint64 {
	out := make([]uint64, len(l.Regions))
	for i, r := range l.Regions {
		out[i] = r.Base
	}
	return out
}

// SameBlocks reports whether src and dst blocks map one to one, whole:
// equal block sizes and the same heads (or MLA on both). Then the mapped
// pairs of a request are its blocks, and staging needs no segment list.
func SameBlocks(src, dst *descriptors.Layout) bool {
	if src.BlockSize != dst.BlockSize || src.BlockLen() != dst.BlockLen() || len(src.Regions) != len(dst.Regions) {
		return false
	}
	if src.MLA || dst.MLA {
		return src.MLA && dst.MLA
	}
	return src.FirstHead() == dst.FirstHead() && src.KVHeads == dst.KVHeads
}

// SameBlocksDescs returns how many descriptors the direct transfer of
// blocks src onto blocks dst (one to one, layouts with SameBlocks, l
// either) takes: one per run of blocks that follow each other on both
// sides, in every region, as descriptors.MapCoalescedInto would give. The
// connectors use it to choose the path of such a request without mapping
// it (131,072 pairs for a fragmented 16k-token request).
func SameBlocksDescs(l *descriptors.Layout, src, dst []int) int {
	n := min(len(src), len(dst))
	if n == 0 {
		return 0
	}
	runs := 1
	for k := 1; k < n; k++ {
		if src[k] != src[k-1]+1 || dst[k] != dst[k-1]+1 {
			runs++
		}
	}
	return runs * len(l.Regions)
}

// DstImageGather is the push gather of a request between layouts with
// SameBlocks: source block SrcBlocks[cached+j] goes to image block (r, j)
// of a destination image of dstBlocks blocks at slot.
func DstImageGather(src *descriptors.Layout, srcBlocks []int, cached, dstBlocks int, slot uint64) (BlockCopy, error) {
	if cached < 0 || cached > len(srcBlocks) {
		return BlockCopy{}, fmt.Errorf("staging: %d cached blocks of %d", cached, len(srcBlocks))
	}
	m := min(len(srcBlocks)-cached, dstBlocks)
	bl := src.BlockLen()
	return BlockCopy{Bases: Bases(src), Blocks: srcBlocks[cached : cached+m], BlockLen: bl, Len: bl,
		Slot: slot, SlotStride: uint64(dstBlocks) * bl, ToSlot: true}, nil
}

// Scatter returns the image's scatter into dstBlocks as a block copy.
func (im DstImage) ScatterBlocks(dst *descriptors.Layout, dstBlocks []int, slot uint64) BlockCopy {
	return BlockCopy{Bases: Bases(dst), Blocks: dstBlocks, BlockLen: dst.BlockLen(), Off: im.Off, Len: im.PerBlock,
		Slot: slot, SlotStride: uint64(im.Blocks) * im.PerBlock}
}

// SrcGatherBlocks is SrcGather as a block copy.
func SrcGatherBlocks(src *descriptors.Layout, srcBlocks []int, slot uint64) BlockCopy {
	bl := src.BlockLen()
	return BlockCopy{Bases: Bases(src), Blocks: srcBlocks, BlockLen: bl, Len: bl,
		Slot: slot, SlotStride: uint64(len(srcBlocks)) * bl, ToSlot: true}
}

// SameBlocksRead is the pull READ of a request between layouts with
// SameBlocks from the peer's image of len(srcBlocks) blocks at remote:
// one span covering every region's blocks from cached on, into local, and
// the scatter of it into dstBlocks (destination block j holds source
// block cached+j).
func SameBlocksRead(src, dst *descriptors.Layout, nSrc, cached int, dstBlocks []int, remote uint64, local Slot) (ReadPlan, BlockCopy, error) {
	m := min(nSrc-cached, len(dstBlocks))
	if cached < 0 || m <= 0 {
		return ReadPlan{}, BlockCopy{}, fmt.Errorf("staging: nothing to read (%d cached of %d)", cached, nSrc)
	}
	bl := src.BlockLen()
	stride := uint64(nSrc) * bl
	lo := uint64(cached) * bl
	hi := uint64(len(src.Regions)-1)*stride + uint64(cached+m)*bl
	span := hi - lo
	if span > local.Len {
		return ReadPlan{}, BlockCopy{}, fmt.Errorf("staging: a span of %d bytes does not fit a slot of %d", span, local.Len)
	}
	plan := ReadPlan{
		Local:  nixlList(dst, local.Addr, span),
		Remote: nixlList(src, remote+lo, span),
		Bytes:  span,
	}
	sc := BlockCopy{Bases: Bases(dst), Blocks: dstBlocks[:m], BlockLen: dst.BlockLen(), Len: bl,
		Slot: local.Addr, SlotStride: stride}
	return plan, sc, nil
}

// SplitLists cuts the equal descriptors of local and remote into pieces of
// at most chunk bytes (chunk 0: unchanged).
func SplitLists(local, remote nixl.XferList, chunk uint64) (nixl.XferList, nixl.XferList) {
	if chunk == 0 {
		return local, remote
	}
	l, r := nixl.XferList{Mem: local.Mem}, nixl.XferList{Mem: remote.Mem}
	for i, d := range local.Descs {
		o := remote.Descs[i]
		for off := uint64(0); off < d.Len; off += chunk {
			n := min(chunk, d.Len-off)
			l.Descs = append(l.Descs, nixl.Desc{Addr: d.Addr + off, Len: n, DevID: d.DevID})
			r.Descs = append(r.Descs, nixl.Desc{Addr: o.Addr + off, Len: n, DevID: o.DevID})
		}
	}
	return l, r
}
