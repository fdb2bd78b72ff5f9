package staging

import (
	"math/rand/v2"
	"testing"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// qwenLayout is the Qwen3-32B-like geometry of the GPU benchmarks (64
// layers, 8 KV heads of 256 bytes, 16-token blocks, 2048 blocks) at a
// made-up address: planning touches no memory.
func qwenLayout(base uint64) descriptors.Layout {
	l := descriptors.Layout{Mem: nixl.VRAM, NumLayers: 64, NumBlocks: 2048, BlockSize: 16, KVHeads: 8, HeadBytes: 256, DType: "bfloat16", TPSize: 1}
	for i := range l.NumRegions() {
		l.Regions = append(l.Regions, descriptors.Region{Base: base + uint64(i)*l.RegionLen()})
	}
	return l
}

// BenchmarkPlanFragmented16k plans the staged transfer of a fully
// fragmented 16k-token request (131,072 fragments): what each side's CPU
// does per request besides the copies.
func BenchmarkPlanFragmented16k(b *testing.B) {
	src, dst := qwenLayout(1<<40), qwenLayout(2<<40)
	rng := rand.New(rand.NewPCG(1, 2))
	req := descriptors.Request{SrcBlocks: rng.Perm(2048)[:1024], DstBlocks: rng.Perm(2048)[:1024]}
	var tr descriptors.Transfer
	if _, err := descriptors.MapCoalescedInto(&tr, &src, &dst, req); err != nil {
		b.Fatal(err)
	}
	im, _ := NewDstImage(&src, &dst, 1024)
	slot := Slot{Addr: 3 << 40, Len: im.Size()}
	var p Planner
	b.Run("map", func(b *testing.B) {
		for range b.N {
			_, _ = descriptors.MapCoalescedInto(&tr, &src, &dst, req)
		}
	})
	b.Run("write", func(b *testing.B) {
		for range b.N {
			if _, err := p.PlanWrite(&tr, &src, &dst, req.DstBlocks, im, slot, 4<<40); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scatter", func(b *testing.B) {
		for range b.N {
			_ = im.Scatter(nil, &dst, req.DstBlocks, 4<<40)
		}
	})
	b.Run("read", func(b *testing.B) {
		for range b.N {
			if _, err := p.PlanRead(&tr, &src, &dst, req.SrcBlocks, 4<<40, slot); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("srcgather", func(b *testing.B) {
		for range b.N {
			_ = SrcGather(nil, &src, req.SrcBlocks, 4<<40)
		}
	})
}
