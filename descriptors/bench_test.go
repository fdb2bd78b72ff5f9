package descriptors

import (
	"testing"

	"github.com/gonixl/gonixl/nixl"
)

// qwen returns a Qwen3-32B-like rank: 64 layers with K and V regions (128),
// 8 KV heads split over tp ranks, head_dim 128 in bfloat16 (256 bytes),
// 4096 blocks of blockTokens tokens per region, on GPU dev.
func qwen(blockTokens, rank, tp int, base uint64) *Layout {
	l := &Layout{Mem: nixl.VRAM, NumLayers: 64, NumBlocks: 4096, BlockSize: blockTokens, KVHeads: 8 / tp,
		HeadBytes: 256, DType: "bfloat16", TPRank: rank, TPSize: tp}
	l.Regions = make([]Region, l.NumRegions())
	for i := range l.Regions {
		l.Regions[i] = Region{Base: base + uint64(i)*l.RegionLen(), DevID: uint64(rank)}
	}
	return l
}

// ids returns n block ids from start with the given stride: stride 1 is one
// contiguous run, stride 2 leaves no two blocks adjacent.
func ids(n, start, stride int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i*stride
	}
	return out
}

// A 16k-token request: 1024 blocks of 16 tokens on both sides.
func benchMap(b *testing.B, src, dst *Layout, req Request, coalesced bool) {
	b.ReportAllocs()
	var pairs int
	for b.Loop() {
		if coalesced {
			t, _, err := MapCoalesced(src, dst, req)
			if err != nil {
				b.Fatal(err)
			}
			pairs = t.Len()
		} else {
			t, err := MapRequest(src, dst, req)
			if err != nil {
				b.Fatal(err)
			}
			t, _ = Coalesce(t)
			pairs = t.Len()
		}
	}
	b.ReportMetric(float64(pairs), "pairs")
}

func BenchmarkMapCoalesced(b *testing.B) {
	contiguous := Request{SrcBlocks: ids(1024, 100, 1), DstBlocks: ids(1024, 2000, 1)}
	fragmented := Request{SrcBlocks: ids(1024, 0, 2), DstBlocks: ids(1024, 1, 2)}
	b.Run("Qwen3-32B/16k/TP1-TP1/contiguous", func(b *testing.B) {
		benchMap(b, qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41), contiguous, true)
	})
	b.Run("Qwen3-32B/16k/TP1-TP1/fragmented", func(b *testing.B) {
		benchMap(b, qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41), fragmented, true)
	})
	b.Run("Qwen3-32B/16k/TP2-TP4/contiguous", func(b *testing.B) {
		benchMap(b, qwen(16, 1, 2, 1<<40), qwen(16, 2, 4, 1<<41), contiguous, true)
	})
	b.Run("Qwen3-32B/16k/TP4-TP2/contiguous", func(b *testing.B) {
		benchMap(b, qwen(16, 1, 4, 1<<40), qwen(16, 0, 2, 1<<41), contiguous, true)
	})
	b.Run("Qwen3-32B/16k/TP1-TP1/prefix-hit-half/contiguous", func(b *testing.B) {
		req := Request{SrcBlocks: contiguous.SrcBlocks, DstBlocks: ids(512, 2000, 1), DstCached: 512}
		benchMap(b, qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41), req, true)
	})
	b.Run("Qwen3-32B/16k/TP8-TP8/blocks32-16/contiguous", func(b *testing.B) {
		// One head per rank: the 16-token pieces of a 32-token block merge.
		req := Request{SrcBlocks: ids(512, 100, 1), DstBlocks: ids(1024, 2000, 1)}
		benchMap(b, qwen(32, 3, 8, 1<<40), qwen(16, 3, 8, 1<<41), req, true)
	})
}

// BenchmarkMapThenCoalesce is the two-step path (per-block lists, then a
// separate merge) for comparison with MapCoalesced.
func BenchmarkMapThenCoalesce(b *testing.B) {
	contiguous := Request{SrcBlocks: ids(1024, 100, 1), DstBlocks: ids(1024, 2000, 1)}
	fragmented := Request{SrcBlocks: ids(1024, 0, 2), DstBlocks: ids(1024, 1, 2)}
	b.Run("Qwen3-32B/16k/TP1-TP1/contiguous", func(b *testing.B) {
		benchMap(b, qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41), contiguous, false)
	})
	b.Run("Qwen3-32B/16k/TP1-TP1/fragmented", func(b *testing.B) {
		benchMap(b, qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41), fragmented, false)
	})
}

// BenchmarkMapCoalescedInto reuses one Transfer, as a connector goroutine
// does: no allocation, no zeroing of fresh memory.
func BenchmarkMapCoalescedInto(b *testing.B) {
	contiguous := Request{SrcBlocks: ids(1024, 100, 1), DstBlocks: ids(1024, 2000, 1)}
	fragmented := Request{SrcBlocks: ids(1024, 0, 2), DstBlocks: ids(1024, 1, 2)}
	for _, bc := range []struct {
		name string
		req  Request
	}{{"contiguous", contiguous}, {"fragmented", fragmented}} {
		b.Run("Qwen3-32B/16k/TP1-TP1/"+bc.name, func(b *testing.B) {
			src, dst := qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41)
			var buf Transfer
			if _, err := MapCoalescedInto(&buf, src, dst, fragmented); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := MapCoalescedInto(&buf, src, dst, bc.req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "pairs")
		})
	}
}

// BenchmarkMapGroups maps a 16k-token request of a Qwen3-Next-like hybrid
// (12 full-attention layers, K and V packed, 2 KV heads of 256 bf16 dims,
// 16-token blocks; 36 GDN layers whose state splits over TP) from prefill
// TP 2 into decode TP 1, the pair of prefill rank 0.
func BenchmarkMapGroups(b *testing.B) {
	g := Geometry{Layers: 48, KVHeads: 2, HeadDim: 256, DType: "bfloat16", BlockSize: 16, Blocks: 1100, TPSize: 2, KVPacked: true,
		Groups: &[]GroupGeometry{{Kind: KindFull, Layers: 12},
			{Kind: KindSSM, Layers: 36, Conv: []int{3 * 8192 * 2, 3 * 2048 * 2, 3 * 2048 * 2}, State: 32 * 128 * 128 * 4}}}
	dg := g
	dg.TPSize = 1
	src, err := g.Layout(nixl.VRAM, 0, nixl.Desc{Addr: 1 << 40, Len: g.RankBytes()})
	if err != nil {
		b.Fatal(err)
	}
	dst, err := dg.Layout(nixl.VRAM, 0, nixl.Desc{Addr: 1 << 44, Len: dg.RankBytes()})
	if err != nil {
		b.Fatal(err)
	}
	blocks := make([]int, 1024)
	for i := range blocks {
		blocks[i] = i
	}
	req := GroupRequest{Tokens: 16384, Src: [][]int{blocks, {1050}}, Dst: [][]int{blocks, {1060}}}
	buf := &Transfer{}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MapGroupsInto(buf, &src, &dst, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "pairs")
}
