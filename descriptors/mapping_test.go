package descriptors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

// Hand-sized layouts: HeadBytes 4 and tiny blocks, so that every address in
// the tables below can be checked with mental arithmetic. One layer: region 0
// is K, region 1 is V. Source regions start at 1000 and 2000, destination
// regions at 5000 and 6000 (decimal), on devices 0 (source) and 1
// (destination).
func small(blockTokens, kvHeads, tpRank, tpSize int, bases ...uint64) *Layout {
	dev := uint64(0)
	if bases[0] >= 5000 {
		dev = 1
	}
	l := &Layout{Mem: nixl.VRAM, NumLayers: 1, NumBlocks: 8, BlockSize: blockTokens, KVHeads: kvHeads,
		HeadBytes: 4, DType: "bfloat16", TPRank: tpRank, TPSize: tpSize}
	for _, b := range bases {
		l.Regions = append(l.Regions, Region{Base: b, DevID: dev})
	}
	if len(bases) == 1 {
		l.MLA = true
	}
	return l
}

// pairs is a compact expected list: {src addr, dst addr, len}.
type pairs [][3]uint64

func flatten(t Transfer) pairs {
	var out pairs
	for i := range t.Src.Descs {
		require.Equal(nil, t.Src.Descs[i].Len, t.Dst.Descs[i].Len, "pair %d", i)
		out = append(out, [3]uint64{t.Src.Descs[i].Addr, t.Dst.Descs[i].Addr, t.Src.Descs[i].Len})
	}
	return out
}

func TestMapTable(t *testing.T) {
	tests := []struct {
		name      string
		src, dst  *Layout
		req       Request
		plain     pairs // MapRequest
		coalesced pairs // MapCoalesced and Coalesce
	}{
		{
			// BlockLen 2 tokens x 2 heads x 4 = 16. Blocks 3,4 -> 0,1 are
			// adjacent on both sides, 7 -> 5 is not.
			name: "equal TP and block size",
			src:  small(2, 2, 0, 1, 1000, 2000), dst: small(2, 2, 0, 1, 5000, 6000),
			req:       Request{SrcBlocks: []int{3, 4, 7}, DstBlocks: []int{0, 1, 5}},
			plain:     pairs{{1048, 5000, 16}, {1064, 5016, 16}, {1112, 5080, 16}, {2048, 6000, 16}, {2064, 6016, 16}, {2112, 6080, 16}},
			coalesced: pairs{{1048, 5000, 32}, {1112, 5080, 16}, {2048, 6000, 32}, {2112, 6080, 16}},
		},
		{
			// Destination rank 1 of TP 2 holds head 1: it takes bytes 8..15
			// (head 1 x 2 tokens x 4) of each 16-byte source block into its
			// whole 8-byte block. Source runs are not adjacent: no merge.
			name: "destination TP larger: head slice of each source block",
			src:  small(2, 2, 0, 1, 1000, 2000), dst: small(2, 1, 1, 2, 5000, 6000),
			req:       Request{SrcBlocks: []int{3, 4}, DstBlocks: []int{0, 1}},
			plain:     pairs{{1056, 5000, 8}, {1072, 5008, 8}, {2056, 6000, 8}, {2072, 6008, 8}},
			coalesced: pairs{{1056, 5000, 8}, {1072, 5008, 8}, {2056, 6000, 8}, {2072, 6008, 8}},
		},
		{
			// Source rank 1 of TP 2 holds head 1 (8-byte blocks); it fills
			// bytes 8..15 of each 16-byte destination block.
			name: "source TP larger: source fills its head slice of the destination block",
			src:  small(2, 1, 1, 2, 1000, 2000), dst: small(2, 2, 0, 1, 5000, 6000),
			req:       Request{SrcBlocks: []int{3, 4}, DstBlocks: []int{0, 1}},
			plain:     pairs{{1024, 5008, 8}, {1032, 5024, 8}, {2024, 6008, 8}, {2032, 6024, 8}},
			coalesced: pairs{{1024, 5008, 8}, {1032, 5024, 8}, {2024, 6008, 8}, {2032, 6024, 8}},
		},
		{
			// MLA: one region per layer, whole blocks, any rank pairing.
			name: "MLA replicated",
			src:  small(2, 2, 1, 2, 1000), dst: small(2, 2, 3, 4, 5000),
			req:       Request{SrcBlocks: []int{2, 3}, DstBlocks: []int{6, 7}},
			plain:     pairs{{1032, 5096, 16}, {1048, 5112, 16}},
			coalesced: pairs{{1032, 5096, 32}},
		},
		{
			// Source blocks of 4 tokens (32 bytes: head 0 at 0..15, head 1
			// at 16..31), destination blocks of 2 tokens (16 bytes: head 0
			// at 0..7, head 1 at 8..15). Source block 1 = tokens 0..3 goes
			// to destination blocks 5 (tokens 0,1) and 2 (tokens 2,3), head
			// by head.
			name: "source blocks larger (ratio 2)",
			src:  small(4, 2, 0, 1, 1000, 2000), dst: small(2, 2, 0, 1, 5000, 6000),
			req:       Request{SrcBlocks: []int{1}, DstBlocks: []int{5, 2}},
			plain:     pairs{{1032, 5080, 8}, {1040, 5032, 8}, {1048, 5088, 8}, {1056, 5040, 8}, {2032, 6080, 8}, {2040, 6032, 8}, {2048, 6088, 8}, {2056, 6040, 8}},
			coalesced: pairs{{1032, 5080, 8}, {1040, 5032, 8}, {1048, 5088, 8}, {1056, 5040, 8}, {2032, 6080, 8}, {2040, 6032, 8}, {2048, 6088, 8}, {2056, 6040, 8}},
		},
		{
			// One head per rank (TP 2 of 2 heads, rank 0): source blocks of
			// 2 tokens (8 bytes), destination blocks of 4 tokens (16 bytes).
			// Source blocks 3,4 are adjacent and fill destination block 1 in
			// order: the two pieces merge.
			name: "destination blocks larger (ratio 2), single head merges",
			src:  small(2, 1, 0, 2, 1000, 2000), dst: small(4, 1, 0, 2, 5000, 6000),
			req:       Request{SrcBlocks: []int{3, 4}, DstBlocks: []int{1}},
			plain:     pairs{{1024, 5016, 8}, {1032, 5024, 8}, {2024, 6016, 8}, {2032, 6024, 8}},
			coalesced: pairs{{1024, 5016, 16}, {2024, 6016, 16}},
		},
		{
			// Destination already holds the first two blocks of the
			// request: only source block 7 moves, into destination block 5.
			name: "prefix hit, equal block size",
			src:  small(2, 2, 0, 1, 1000, 2000), dst: small(2, 2, 0, 1, 5000, 6000),
			req:       Request{SrcBlocks: []int{3, 4, 7}, DstBlocks: []int{5}, DstCached: 2},
			plain:     pairs{{1112, 5080, 16}, {2112, 6080, 16}},
			coalesced: pairs{{1112, 5080, 16}, {2112, 6080, 16}},
		},
		{
			// Source blocks of 4 tokens, destination of 2, one head (16- and
			// 8-byte blocks). Destination holds tokens 0,1 (1 block); tokens
			// 2..7 move: source block 1 second half, then source block 6.
			name: "prefix hit splitting a larger source block",
			src:  small(4, 1, 0, 2, 1000, 2000), dst: small(2, 1, 0, 2, 5000, 6000),
			req:       Request{SrcBlocks: []int{1, 6}, DstBlocks: []int{0, 3, 2}, DstCached: 1},
			plain:     pairs{{1024, 5000, 8}, {1096, 5024, 8}, {1104, 5016, 8}, {2024, 6000, 8}, {2096, 6024, 8}, {2104, 6016, 8}},
			coalesced: pairs{{1024, 5000, 8}, {1096, 5024, 8}, {1104, 5016, 8}, {2024, 6000, 8}, {2096, 6024, 8}, {2104, 6016, 8}},
		},
		{
			// Everything cached: nothing to move, no error.
			name: "prefix hit covering the whole request",
			src:  small(2, 2, 0, 1, 1000, 2000), dst: small(2, 2, 0, 1, 5000, 6000),
			req: Request{SrcBlocks: []int{3, 4}, DstBlocks: nil, DstCached: 2},
		},
		{
			// Last blocks partly used: 3 source blocks of 2 tokens (5 or 6
			// tokens) into 2 destination blocks of 4 tokens; only 3 units
			// exist on the source, so destination block 6 gets one unit.
			name: "partial last block",
			src:  small(2, 1, 0, 2, 1000, 2000), dst: small(4, 1, 0, 2, 5000, 6000),
			req:       Request{SrcBlocks: []int{0, 1, 2}, DstBlocks: []int{4, 6}},
			plain:     pairs{{1000, 5064, 8}, {1008, 5072, 8}, {1016, 5096, 8}, {2000, 6064, 8}, {2008, 6072, 8}, {2016, 6096, 8}},
			coalesced: pairs{{1000, 5064, 16}, {1016, 5096, 8}, {2000, 6064, 16}, {2016, 6096, 8}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plain, err := MapRequest(tc.src, tc.dst, tc.req)
			require.NoError(t, err)
			assert.Equal(t, tc.plain, flatten(plain), "MapRequest")
			assert.Equal(t, tc.src.Mem, plain.Src.Mem)
			assert.Equal(t, tc.dst.Mem, plain.Dst.Mem)
			for _, d := range plain.Src.Descs {
				assert.Equal(t, uint64(0), d.DevID)
			}
			for _, d := range plain.Dst.Descs {
				assert.Equal(t, uint64(1), d.DevID)
			}
			var sum uint64
			for _, p := range tc.plain {
				sum += p[2]
			}
			assert.Equal(t, sum, plain.Bytes)

			merged, st, err := MapCoalesced(tc.src, tc.dst, tc.req)
			require.NoError(t, err)
			assert.Equal(t, tc.coalesced, flatten(merged), "MapCoalesced")
			assert.Equal(t, Stats{Before: len(tc.plain), After: len(tc.coalesced)}, st)
			assert.Equal(t, sum, merged.Bytes)

			again, st2 := Coalesce(plain)
			assert.Equal(t, tc.coalesced, flatten(again), "Coalesce")
			assert.Equal(t, st, st2)
		})
	}
}

func TestMapIsMapRequestWithoutPrefix(t *testing.T) {
	src, dst := small(2, 2, 0, 1, 1000, 2000), small(2, 2, 0, 1, 5000, 6000)
	a, err := Map(src, dst, []int{3, 4}, []int{0, 1})
	require.NoError(t, err)
	b, err := MapRequest(src, dst, Request{SrcBlocks: []int{3, 4}, DstBlocks: []int{0, 1}})
	require.NoError(t, err)
	assert.Equal(t, b, a)
}

func TestTransferSides(t *testing.T) {
	src, dst := small(2, 2, 0, 1, 1000, 2000), small(2, 2, 0, 1, 5000, 6000)
	tr, err := Map(src, dst, []int{3}, []int{0})
	require.NoError(t, err)
	local, remote := tr.Sides(nixl.Read) // pull: the destination reads
	assert.Equal(t, tr.Dst, local)
	assert.Equal(t, tr.Src, remote)
	local, remote = tr.Sides(nixl.Write) // push: the source writes
	assert.Equal(t, tr.Src, local)
	assert.Equal(t, tr.Dst, remote)
}

func TestCoalesceKeepsRegionsApart(t *testing.T) {
	// K and V regions back to back on both sides: the last block of K and
	// block 0 of V are adjacent in memory, but lie in two registrations.
	src := small(2, 2, 0, 1, 1000, 1128) // region length 8 x 16 = 128
	dst := small(2, 2, 0, 1, 5000, 5128)
	// K's last pair (block 7) ends where V's first pair (block 0) starts.
	req := Request{SrcBlocks: []int{0, 7}, DstBlocks: []int{0, 7}}
	want := pairs{{1000, 5000, 16}, {1112, 5112, 16}, {1128, 5128, 16}, {1240, 5240, 16}}
	tr, err := MapRequest(src, dst, req)
	require.NoError(t, err)
	require.Equal(t, want, flatten(tr))
	c, st := Coalesce(tr)
	assert.Equal(t, Stats{Before: 4, After: 4}, st)
	assert.Equal(t, want, flatten(c))
	m, st, err := MapCoalesced(src, dst, req)
	require.NoError(t, err)
	assert.Equal(t, Stats{Before: 4, After: 4}, st)
	assert.Equal(t, want, flatten(m))

	// A hand-built Transfer carries no region boundaries: adjacency alone.
	hand := Transfer{Src: tr.Src, Dst: tr.Dst, Bytes: tr.Bytes}
	c, st = Coalesce(hand)
	assert.Equal(t, Stats{Before: 4, After: 3}, st)
	assert.Equal(t, pairs{{1000, 5000, 16}, {1112, 5112, 32}, {1240, 5240, 16}}, flatten(c))
	assert.Equal(t, want, flatten(tr), "input modified")
}

func TestCoalesceHandBuilt(t *testing.T) {
	d := func(addr, n, dev uint64) nixl.Desc { return nixl.Desc{Addr: addr, Len: n, DevID: dev} }
	tr := Transfer{
		Src: nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{d(0, 4, 0), d(4, 4, 0), d(8, 4, 1), d(12, 4, 1), d(16, 4, 1), d(100, 4, 1)}},
		Dst: nixl.XferList{Mem: nixl.VRAM, Descs: []nixl.Desc{d(0, 4, 0), d(4, 4, 0), d(8, 4, 0), d(12, 4, 0), d(20, 4, 0), d(24, 4, 0)}},
	}
	c, st := Coalesce(tr)
	// 0+1 merge; 2 changes source device; 2+3 merge; 4 skips 16 on the
	// destination; 5 skips on the source.
	assert.Equal(t, Stats{Before: 6, After: 4}, st)
	assert.Equal(t, []nixl.Desc{d(0, 8, 0), d(8, 8, 1), d(16, 4, 1), d(100, 4, 1)}, c.Src.Descs)
	assert.Equal(t, []nixl.Desc{d(0, 8, 0), d(8, 8, 0), d(20, 4, 0), d(24, 4, 0)}, c.Dst.Descs)
	assert.Equal(t, nixl.DRAM, c.Src.Mem)
	assert.Equal(t, nixl.VRAM, c.Dst.Mem)

	// Lists of different lengths are passed on untouched.
	bad := Transfer{Src: tr.Src, Dst: nixl.XferList{Descs: tr.Dst.Descs[:2]}}
	c, st = Coalesce(bad)
	assert.Equal(t, Stats{Before: 6, After: 6}, st)
	assert.Equal(t, bad, c)
}
