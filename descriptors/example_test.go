package descriptors_test

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// engineRank describes one rank of an engine with 2 layers, 8 KV heads split
// over tp ranks, 16-token blocks and head_dim 128 in bfloat16.
func engineRank(rank, tp int, base uint64) *descriptors.Layout {
	l := &descriptors.Layout{Mem: nixl.VRAM, NumLayers: 2, NumBlocks: 1024, BlockSize: 16,
		KVHeads: 8 / tp, HeadBytes: 256, DType: "bfloat16", TPRank: rank, TPSize: tp}
	for i := 0; i < l.NumRegions(); i++ {
		l.Regions = append(l.Regions, descriptors.Region{Base: base + uint64(i)<<30, DevID: uint64(rank)})
	}
	return l
}

// A decode rank (TP 4) pulls a request from a prefill engine (TP 2): it
// reads from every source rank that holds its heads, with itself as the
// local side. Decode already holds the first block (prefix hit).
func Example_pullRead() {
	prefill := []*descriptors.Layout{engineRank(0, 2, 0x10_0000_0000), engineRank(1, 2, 0x20_0000_0000)}
	decode := engineRank(3, 4, 0x70_0000_0000)
	req := descriptors.Request{SrcBlocks: []int{10, 11, 12, 13}, DstBlocks: []int{5, 6, 7}, DstCached: 1}

	sources, _ := descriptors.Sources(prefill[0], decode)
	for _, s := range sources {
		t, st, err := descriptors.MapCoalesced(prefill[s], decode, req)
		if err != nil {
			panic(err)
		}
		local, remote := t.Sides(nixl.Read) // CreateXferReq(nixl.Read, local, remote, prefill agent, ...)
		fmt.Printf("read from prefill rank %d: %d pairs (%d before coalescing), %d bytes\n", s, len(local.Descs), st.Before, t.Bytes)
		fmt.Printf("first: remote %#x -> local %#x, %d bytes\n", remote.Descs[0].Addr, local.Descs[0].Addr, local.Descs[0].Len)
	}
	fmt.Println("completions expected by this decode rank:", len(sources))
	// Prefill rank 1 holds heads 4..7 in 16 KiB blocks, decode rank 3 heads
	// 6,7 in 8 KiB blocks: source block 11 at 11 x 0x4000, plus 2 heads x 16
	// tokens x 256 bytes, goes whole into destination block 5 at 5 x 0x2000.
	// The head slices are not adjacent: 3 blocks x 4 regions = 12 pairs.

	// Output:
	// read from prefill rank 1: 12 pairs (12 before coalescing), 98304 bytes
	// first: remote 0x200002e000 -> local 0x700000a000, 8192 bytes
	// completions expected by this decode rank: 1
}

// A prefill writer (TP 2, rank 0) pushes into a decode engine (TP 1): it
// writes into every destination rank it feeds, with itself as the local side.
func Example_pushWrite() {
	prefill := engineRank(0, 2, 0x10_0000_0000)
	decode := []*descriptors.Layout{engineRank(0, 1, 0x70_0000_0000)}
	req := descriptors.Request{SrcBlocks: []int{10, 11, 12, 13}, DstBlocks: []int{20, 21, 22, 23}}

	targets, _ := descriptors.Targets(prefill, decode[0])
	var buf descriptors.Transfer // reused from request to request
	for _, r := range targets {
		st, err := descriptors.MapCoalescedInto(&buf, prefill, decode[r], req)
		if err != nil {
			panic(err)
		}
		local, remote := buf.Sides(nixl.Write) // CreateXferReq(nixl.Write, local, remote, decode agent, ...)
		fmt.Printf("write into decode rank %d: %d pairs (%d before coalescing)\n", r, len(local.Descs), st.Before)
		fmt.Printf("first: local %#x -> remote %#x, %d bytes\n", local.Descs[0].Addr, remote.Descs[0].Addr, local.Descs[0].Len)
	}
	// Prefill rank 0 holds heads 0..3 (16 KiB blocks), the first half of
	// each 32 KiB decode block: block 10 at 10 x 0x4000 into block 20 at
	// 20 x 0x8000; the decode halves are not adjacent, so nothing merges.

	// Output:
	// write into decode rank 0: 16 pairs (16 before coalescing)
	// first: local 0x1000028000 -> remote 0x70000a0000, 16384 bytes
}
