package staging

import (
	"fmt"
	"slices"

	"github.com/gonixl/gonixl/nixl"
)

// A staged transfer is cut into chunks so that its three stages overlap:
// while chunk c moves over the link, the source gathers chunk c+1 and the
// destination scatters chunk c-1. A chunk is a range of regions (layers'
// K or V caches) of the image, because images are region-major: a range
// of regions is one contiguous run of the slot on both sides, so every
// chunk still moves as one descriptor, and both sides compute the same
// ranges from (regions, chunks) alone.

// DefaultChunks is the number of chunks of a staged transfer when
// Config.Chunks is zero. Measured on one H200 (BenchmarkStagedKV, fully
// fragmented 16k tokens, GONIXL_E2E_CHUNKS; docs/gpu.md), where gather,
// transfer and scatter share the one GPU's memory bandwidth: 2 chunks
// moved push at 0.288-0.291x cuMemcpyDtoD and pull at 0.293-0.296x, against
// 0.268-0.270x and 0.282-0.289x for 4, 0.279x (push) for 3 and 0.239x for 6;
// 1 chunk gives up the overlap (0.26x push in an earlier run) and 16 was
// the slowest (each chunk's launch and transfer cost more than the
// overlap gains). Across two GPUs the passes use different memory and
// more chunks may gain more: set Config.Chunks there.
const DefaultChunks = 2

// MaxChunks bounds Config.Chunks and the chunk count a peer may name.
const MaxChunks = 64

// ChunkCount returns how many chunks a staged transfer of regions regions
// is cut into when want are configured: want (DefaultChunks for 0) capped
// by the regions and by MaxChunks, at least 1.
func ChunkCount(regions, want int) int {
	if want == 0 {
		want = DefaultChunks
	}
	return max(1, min(want, regions, MaxChunks))
}

// ChunkRegions returns the regions [r0, r1) of chunk c of n over regions
// regions: the regions spread as evenly as they go, earlier chunks taking
// the remainder. n must be in [1, regions] and c in [0, n).
func ChunkRegions(regions, n, c int) (r0, r1 int) {
	q, rem := regions/n, regions%n
	r0 = c*q + min(c, rem)
	r1 = r0 + q
	if c < rem {
		r1++
	}
	return r0, r1
}

// CheckChunk validates a chunk named by a peer: n chunks over regions
// regions, chunk c.
func CheckChunk(regions, n, c int) error {
	switch {
	case n < 1 || n > min(regions, MaxChunks):
		return fmt.Errorf("staging: %d chunks over %d regions, want 1..%d", n, regions, min(regions, MaxChunks))
	case c < 0 || c >= n:
		return fmt.Errorf("staging: chunk %d of %d", c, n)
	}
	return nil
}

// Regions returns the part of the block copy that covers regions
// [r0, r1): its items (r, j) for r in the range, at the same slot offsets.
func (b BlockCopy) Regions(r0, r1 int) BlockCopy {
	b.Slot += uint64(r0) * b.SlotStride
	b.Bases = b.Bases[r0:r1]
	return b
}

// BlockRange returns the part of the block copy that covers its blocks
// [j0, j1) (indexes into Blocks): its items (r, j) for j in the range, at
// the same slot offsets. A progressive part of an image is such a range.
func (b BlockCopy) BlockRange(j0, j1 int) BlockCopy {
	b.Slot += uint64(j0) * b.Len
	b.Blocks = b.Blocks[j0:j1]
	return b
}

// Chunk is one piece of a staged transfer: the regions [R0, R1) of its
// image, the bytes [Off, Off+Len) of it in the slot.
type Chunk struct {
	R0, R1   int
	Off, Len uint64
}

// ImageChunks cuts an image of regions regions, stride bytes apart with
// the last region's part ending at end (both from the image's start), into
// n chunks. A chunk that holds no region is left out.
func ImageChunks(regions, n int, stride, end uint64) []Chunk {
	out := make([]Chunk, 0, n)
	for c := range n {
		r0, r1 := ChunkRegions(regions, n, c)
		if r0 == r1 {
			continue
		}
		lo, hi := uint64(r0)*stride, uint64(r1)*stride
		if r1 == regions {
			hi = end
		}
		out = append(out, Chunk{R0: r0, R1: r1, Off: lo, Len: hi - lo})
	}
	return out
}

// Descs returns how many descriptors the chunk moves as when cut into
// pieces of at most transferChunk bytes (0: one).
func (ch Chunk) Descs(transferChunk uint64) int {
	if transferChunk == 0 || ch.Len == 0 {
		return 1
	}
	return int((ch.Len + transferChunk - 1) / transferChunk)
}

// ChunkLists returns the descriptors of chunk ch of a staged transfer
// whose whole runs local -> remote as one descriptor each side.
func ChunkLists(local, remote nixl.XferList, ch Chunk) (nixl.XferList, nixl.XferList) {
	l, r := local.Descs[0], remote.Descs[0]
	return nixl.XferList{Mem: local.Mem, Descs: []nixl.Desc{{Addr: l.Addr + ch.Off, Len: ch.Len, DevID: l.DevID}}},
		nixl.XferList{Mem: remote.Mem, Descs: []nixl.Desc{{Addr: r.Addr + ch.Off, Len: ch.Len, DevID: r.DevID}}}
}

// SplitGather cuts the gather segments of a staged WRITE (each Dst in the
// slot from base) at the chunks' bounds, so that chunk k's gather is
// out[k]: a segment that crosses a bound is cut in two. segs must be in
// increasing Dst order, as PlanWrite returns them (region-major).
func SplitGather(segs []Seg, base uint64, chunks []Chunk) ([][]Seg, error) {
	out := make([][]Seg, len(chunks))
	k := 0
	for _, s := range segs {
		for s.Len > 0 {
			off := s.Dst - base
			for k < len(chunks) && off >= chunks[k].Off+chunks[k].Len {
				k++
			}
			if k == len(chunks) || off < chunks[k].Off {
				return nil, fmt.Errorf("staging: gather segment to slot offset %d is outside the chunks (or out of order)", off)
			}
			n := min(s.Len, chunks[k].Off+chunks[k].Len-off)
			out[k] = append(out[k], Seg{Src: s.Src, Dst: s.Dst, Len: n})
			s = Seg{Src: s.Src + n, Dst: s.Dst + n, Len: s.Len - n}
		}
	}
	for i := range out {
		out[i] = slices.Clip(out[i])
	}
	return out, nil
}
