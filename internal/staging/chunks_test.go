package staging

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChunkRegions: the chunks of every count cover every region once,
// in order, their sizes differing by at most one.
func TestChunkRegions(t *testing.T) {
	for regions := 1; regions <= 130; regions++ {
		for n := 1; n <= min(regions, MaxChunks); n++ {
			next, lo, hi := 0, regions, 0
			for c := range n {
				r0, r1 := ChunkRegions(regions, n, c)
				require.Equal(t, next, r0, "%d regions, chunk %d of %d", regions, c, n)
				require.Greater(t, r1, r0)
				lo, hi, next = min(lo, r1-r0), max(hi, r1-r0), r1
				require.NoError(t, CheckChunk(regions, n, c))
			}
			require.Equal(t, regions, next)
			require.LessOrEqual(t, hi-lo, 1)
		}
	}
	require.Equal(t, DefaultChunks, ChunkCount(128, 0))
	require.Equal(t, 2, ChunkCount(2, 0))
	require.Equal(t, MaxChunks, ChunkCount(1000, 500))
	require.Equal(t, 1, ChunkCount(0, 4))
	for _, bad := range [][3]int{{4, 0, 0}, {4, 5, 0}, {4, 2, 2}, {4, 2, -1}, {100, MaxChunks + 1, 0}} {
		require.Error(t, CheckChunk(bad[0], bad[1], bad[2]), "%v", bad)
	}
}

// TestImageChunks: chunks tile the image from 0 to its end, the last one
// ending at end (a span may stop short of a whole region).
func TestImageChunks(t *testing.T) {
	ch := ImageChunks(5, 2, 100, 460)
	require.Equal(t, []Chunk{{R0: 0, R1: 3, Off: 0, Len: 300}, {R0: 3, R1: 5, Off: 300, Len: 160}}, ch)
	require.Equal(t, 2, ch[1].Descs(100))
	require.Equal(t, 1, ch[1].Descs(0))
	require.Equal(t, []Chunk{{R0: 0, R1: 1, Off: 0, Len: 64}}, ImageChunks(1, 1, 64, 64))
}

// TestSplitGather: segments are cut at the chunks' bounds and keep their
// source; none is lost or moved; a segment outside the chunks is refused.
func TestSplitGather(t *testing.T) {
	const base = 1 << 20
	chunks := ImageChunks(4, 2, 100, 400) // [0,200) [200,400)
	segs := []Seg{{Src: 5000, Dst: base, Len: 150}, {Src: 9000, Dst: base + 150, Len: 100}, {Src: 7000, Dst: base + 250, Len: 150}}
	out, err := SplitGather(segs, base, chunks)
	require.NoError(t, err)
	require.Equal(t, [][]Seg{
		{{Src: 5000, Dst: base, Len: 150}, {Src: 9000, Dst: base + 150, Len: 50}},
		{{Src: 9050, Dst: base + 200, Len: 50}, {Src: 7000, Dst: base + 250, Len: 150}},
	}, out)
	_, err = SplitGather([]Seg{{Src: 1, Dst: base + 390, Len: 20}}, base, chunks)
	require.ErrorContains(t, err, "outside the chunks")
	_, err = SplitGather([]Seg{{Src: 1, Dst: base + 300, Len: 10}, {Src: 1, Dst: base, Len: 10}}, base, chunks)
	require.ErrorContains(t, err, "out of order")
}

// TestBlockCopyRegions: a block copy's region range keeps its items' slot
// offsets.
func TestBlockCopyRegions(t *testing.T) {
	b := BlockCopy{Bases: []uint64{1000, 2000, 3000}, Blocks: []int{2, 0}, BlockLen: 10, Len: 10, Slot: 50000, SlotStride: 20, ToSlot: true}
	whole := b.Segs(nil)
	part := b.Regions(1, 3).Segs(nil)
	require.Equal(t, whole[2:], part)
}

// TestBlockCopyBlockRange: a block copy's block range keeps its items'
// slot offsets: the ranges of a split cover the whole copy's segments.
func TestBlockCopyBlockRange(t *testing.T) {
	b := BlockCopy{Bases: []uint64{1000, 2000}, Blocks: []int{7, 2, 0, 5}, BlockLen: 10, Len: 10, Slot: 50000, SlotStride: 40}
	require.Equal(t, []Seg{{Src: 50010, Dst: 1020, Len: 10}, {Src: 50020, Dst: 1000, Len: 10}, {Src: 50050, Dst: 2020, Len: 10}, {Src: 50060, Dst: 2000, Len: 10}},
		b.BlockRange(1, 3).Segs(nil))
	var split []Seg
	for _, reg := range []int{0, 1} {
		for _, r := range [][2]int{{0, 1}, {1, 3}, {3, 4}} {
			split = append(split, b.Regions(reg, reg+1).BlockRange(r[0], r[1]).Segs(nil)...)
		}
	}
	require.ElementsMatch(t, b.Segs(nil), split)
}
