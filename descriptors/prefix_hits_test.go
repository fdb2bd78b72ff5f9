package descriptors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

func TestPrefixHits(t *testing.T) {
	g := Geometry{Layers: 4, KVHeads: 2, HeadDim: 8, DType: "bfloat16", BlockSize: 16, Blocks: 32, TPSize: 1,
		Groups: &[]GroupGeometry{{Kind: KindFull, Layers: 1}, {Kind: KindSlidingWindow, Layers: 1, Window: 24},
			{Kind: KindSSM, Layers: 2, Conv: []int{64}, State: 128}}}
	l, err := g.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x100000, Len: g.RankBytes()})
	require.NoError(t, err)
	// 70 tokens: 5 full blocks; the window (tokens 46..69) lies in blocks
	// 2..4, so 3 blocks hold it.
	for _, c := range []struct {
		lists [][]int
		want  []int
	}{
		{[][]int{{1, 2, 3, 4, 5}, {7, 8, 9}, {0}}, []int{0, 0, 0}},
		{[][]int{{3, 4, 5}, {9}, {0}}, []int{2, 2, 0}},
		{[][]int{{}, {}, {}}, []int{5, 3, 0}},
		{[][]int{{5}, {1, 2, 3, 4, 5}, {}}, []int{4, 0, 0}}, // the window's list may name blocks before it
	} {
		got, err := PrefixHits(&l, 70, c.lists)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%v", c.lists)
	}
	// A short request lies in its window: every block counts.
	got, err := PrefixHits(&l, 20, [][]int{{3}, {}, {0}})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 0}, got)

	_, err = PrefixHits(&l, 70, [][]int{{1, 2, 3, 4, 5, 6}, {}, {}})
	require.ErrorIs(t, err, ErrInvalid)
	assert.EqualError(t, err, "descriptors: Groups[0] (full): 6 blocks listed, the request's 70 tokens fill 5 blocks of 16 tokens")
	_, err = PrefixHits(&l, 70, [][]int{{}, {}})
	assert.EqualError(t, err, "descriptors: PrefixHits: 2 lists, the layout has 3 KV-cache groups")
	_, err = PrefixHits(&l, -1, [][]int{{}, {}, {}})
	assert.EqualError(t, err, "descriptors: PrefixHits: tokens is -1, want >= 0")

	// A layout without groups is one full group; logical blocks of two
	// physical ones hold 32 tokens.
	plain := small(2, 2, 0, 1, 1000, 2000)
	got, err = PrefixHits(plain, 33, [][]int{{1}})
	require.NoError(t, err)
	assert.Equal(t, []int{ceilDiv(33, plain.BlockSize) - 1}, got)
	ratio := Layout{Mem: nixl.DRAM, NumLayers: 1, NumBlocks: 8, BlockSize: 16, KVHeads: 1, HeadBytes: 8, DType: "bfloat16", TPSize: 1,
		Regions: []Region{{Base: 0x1000}, {Base: 0x9000}}, Groups: []Group{{Kind: KindFull, Regions: []int{0, 1}, PhysicalPerLogical: 2}}}
	require.NoError(t, ratio.Validate())
	got, err = PrefixHits(&ratio, 100, [][]int{{2}})
	require.NoError(t, err)
	assert.Equal(t, []int{3}, got, "100 tokens fill 4 logical blocks of 32")
}
