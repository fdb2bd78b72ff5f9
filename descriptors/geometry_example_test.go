package descriptors_test

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// An engine states its KV cache once, allocates RankBytes per rank and lets
// the geometry place the regions: no region base computed by hand.
func ExampleGeometry_Layout() {
	g := descriptors.Geometry{Layers: 2, KVHeads: 8, HeadDim: 128, DType: "bfloat16",
		BlockSize: 16, Blocks: 64, TPSize: 2}
	buf, err := nixl.AllocBuffer(int(g.RankBytes()))
	if err != nil {
		panic(err)
	}
	defer buf.Free()

	l, err := g.Layout(nixl.DRAM, 1, buf.RegDesc().Desc) // TP rank 1
	if err != nil {
		panic(err)
	}
	fmt.Println("heads on this rank:", l.KVHeads, "of", l.TotalKVHeads(), "- bytes per head:", l.HeadBytes)
	fmt.Println("regions:", len(l.Regions), "x", g.RegionBytes(), "bytes =", g.RankBytes())
	fmt.Println("layer 1 V at offset", l.Regions[3].Base-buf.Addr())
	fmt.Println("valid:", l.Validate() == nil)
	// Output:
	// heads on this rank: 4 of 8 - bytes per head: 256
	// regions: 4 x 1048576 bytes = 4194304
	// layer 1 V at offset 3145728
	// valid: true
}

// An engine that knows its geometry refuses a rank's layout that disagrees
// with it, naming the field.
func ExampleGeometry_Check() {
	g := descriptors.Geometry{Layers: 2, KVHeads: 8, HeadDim: 128, DType: "bfloat16",
		BlockSize: 32, Blocks: 64, TPSize: 2}

	// A layout written by hand, with the wrong block size.
	l := descriptors.Layout{Mem: nixl.VRAM, NumLayers: 2, NumBlocks: 64, BlockSize: 16,
		KVHeads: 4, HeadBytes: 256, DType: "bfloat16", TPRank: 0, TPSize: 2}
	for i := 0; i < l.NumRegions(); i++ {
		l.Regions = append(l.Regions, descriptors.Region{Base: 0x7f00_0000_0000 + uint64(i)<<30})
	}
	fmt.Println(g.Check(l))
	l.BlockSize = 32
	fmt.Println(g.Check(l))
	// Output:
	// descriptors: Layout.BlockSize is 16, the geometry's is 32
	// <nil>
}

// GeometryOf recovers the geometry of a layout received from a peer.
func ExampleGeometryOf() {
	peer := descriptors.Layout{Mem: nixl.VRAM, NumLayers: 32, NumBlocks: 1000, BlockSize: 16,
		KVHeads: 1, ModelKVHeads: 2, HeadBytes: 256, DType: "bfloat16", TPRank: 3, TPSize: 4}
	g := descriptors.GeometryOf(peer)
	fmt.Printf("%d layers, %d KV heads of dim %d, %d per rank over TP %d\n", g.Layers, g.KVHeads, g.HeadDim, g.RankHeads(), g.TPSize)
	// Output:
	// 32 layers, 2 KV heads of dim 128, 1 per rank over TP 4
}
