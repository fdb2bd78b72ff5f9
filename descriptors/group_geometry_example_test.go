package descriptors_test

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// ranksOf builds every rank's layout of a geometry, each rank's cache at
// its own (made-up) address.
func ranksOf(g descriptors.Geometry, base uint64) []*descriptors.Layout {
	out := make([]*descriptors.Layout, g.TPSize)
	for r := range out {
		l, err := g.Layout(nixl.VRAM, r, nixl.Desc{Addr: base + uint64(r)<<36, Len: g.RankBytes(), DevID: uint64(r)})
		if err != nil {
			panic(err)
		}
		out[r] = &l
	}
	return out
}

// A sliding-window model (gpt-oss style: full-attention layers beside
// sliding-window ones) is one Geometry with two groups. The prefill (TP 2)
// sends a 300-token request to a decode rank (TP 1) that holds none of it:
// all 19 blocks of the full group, and of the window group (128 tokens)
// only the 9 blocks the window touches, listed by both sides. Each prefill
// rank fills its half of the heads of each decode block: one 16 KiB run
// per block and layer (the halves of a block are not adjacent runs).
func ExampleGeometry_slidingWindow() {
	g := descriptors.Geometry{Layers: 4, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 64, TPSize: 2,
		KVPacked: true, Groups: &[]descriptors.GroupGeometry{
			{Kind: descriptors.KindFull, Layers: 2},
			{Kind: descriptors.KindSlidingWindow, Layers: 2, Window: 128},
		}}
	prefill := ranksOf(g, 0x10_0000_0000)
	dg := g
	dg.TPSize = 1
	decode := ranksOf(dg, 0x70_0000_0000)[0]

	full := make([]int, 19) // ceil(300/16) blocks
	for i := range full {
		full[i] = i
	}
	req := descriptors.GroupRequest{Tokens: 300,
		Src: [][]int{full, {30, 31, 32, 33, 34, 35, 36, 37, 38}},
		Dst: [][]int{full, {40, 41, 42, 43, 44, 45, 46, 47, 48}}}
	sources, _ := descriptors.Sources(prefill[0], decode)
	for _, s := range sources {
		t, st, err := descriptors.MapGroups(prefill[s], decode, req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("prefill rank %d: %d pairs (%d before merging), %d bytes\n", s, t.Len(), st.Before, t.Bytes)
	}
	fmt.Println("groups:", len(decode.Groups), "regions:", len(decode.Regions), "rank bytes:", dg.RankBytes())
	// Output:
	// prefill rank 0: 56 pairs (56 before merging), 917504 bytes
	// prefill rank 1: 56 pairs (56 before merging), 917504 bytes
	// groups: 2 regions: 4 rank bytes: 8388608
}

// A hybrid Mamba model (Nemotron-H / Qwen3-Next style: attention layers
// beside Mamba2 layers) is one Geometry too: the SSM group states a slot's
// conv sub-projections (x, B, C) and temporal state over the whole model,
// and each rank holds its TP share. Between TP 2 and TP 1 every prefill
// rank sends its head of each of the 3 attention blocks, and its half of
// each of the 4 state parts of each Mamba layer into the decode rank's
// slot: 3 + 2x4 runs.
func ExampleGeometry_hybridMamba() {
	g := descriptors.Geometry{Layers: 3, KVHeads: 2, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 32, TPSize: 2,
		KVPacked: true, Groups: &[]descriptors.GroupGeometry{
			{Kind: descriptors.KindFull, Layers: 1},
			{Kind: descriptors.KindSSM, Layers: 2, Conv: []int{3 * 2048, 3 * 256, 3 * 256}, State: 16 * 64 * 128 * 4},
		}}
	prefill := ranksOf(g, 0x10_0000_0000)
	dg := g
	dg.TPSize = 1
	decode := ranksOf(dg, 0x70_0000_0000)[0]
	fmt.Println("state per slot on a prefill rank:", prefill[0].Groups[1].SSM.Conv, prefill[0].Groups[1].SSM.State)

	req := descriptors.GroupRequest{Tokens: 40, Src: [][]int{{4, 5, 6}, {9}}, Dst: [][]int{{1, 2, 3}, {7}}}
	sources, _ := descriptors.Sources(prefill[0], decode)
	for _, s := range sources {
		t, _, err := descriptors.MapGroups(prefill[s], decode, req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("prefill rank %d: %d pairs, %d bytes\n", s, t.Len(), t.Bytes)
	}
	// Output:
	// state per slot on a prefill rank: [3072 384 384] 262144
	// prefill rank 0: 11 pairs, 544256 bytes
	// prefill rank 1: 11 pairs, 544256 bytes
}
