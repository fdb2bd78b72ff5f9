package staging

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// groupLayout is a hybrid layout (1 attention layer, 2 Mamba layers) at
// made-up addresses.
func groupLayout(t *testing.T) descriptors.Layout {
	g := descriptors.Geometry{Layers: 3, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 16, Blocks: 8, TPSize: 1,
		Groups: &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 1}, {Kind: descriptors.KindSSM, Layers: 2, Conv: []int{24, 8, 8}, State: 32}}}
	l, err := g.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 1 << 20, Len: g.RankBytes()})
	require.NoError(t, err)
	return l
}

// The group image holds every group's listed blocks, region after region
// of each group, each region with its own block length; the gathers are
// one block copy per group.
func TestGroupImage(t *testing.T) {
	l := groupLayout(t)
	lists := [][]int{{3, 4, 6}, {2}}
	attn, state := l.BlockLenOf(0), l.BlockLenOf(2)
	require.EqualValues(t, 16*2*8, attn, "16 tokens x 2 heads x 8 bytes")
	require.EqualValues(t, 72, state, "conv 24+8+8, state 32")
	size, err := GroupImageSize(&l, lists)
	require.NoError(t, err)
	require.Equal(t, 2*3*attn+2*1*state, size, "K and V of 3 blocks, 2 SSM layers of 1 slot")
	copies, err := GroupGatherBlocks(&l, lists, 0x9000)
	require.NoError(t, err)
	require.Len(t, copies, 2)
	require.Equal(t, []int{3, 4, 6}, copies[0].Blocks)
	require.Equal(t, uint64(0x9000), copies[0].Slot)
	require.Equal(t, 3*attn, copies[0].SlotStride)
	require.Equal(t, uint64(0x9000)+2*3*attn, copies[1].Slot)
	require.Equal(t, []uint64{l.Regions[2].Base, l.Regions[3].Base}, copies[1].Bases)

	_, err = GroupImageSize(&l, [][]int{{1}})
	require.EqualError(t, err, "staging: 1 group lists for 2 groups")
	shared := l
	shared.Groups = append([]descriptors.Group(nil), l.Groups...)
	shared.Groups[1].Regions = []int{0, 2}
	_, err = GroupImageSize(&shared, lists)
	require.EqualError(t, err, "staging: region 0 is shared by groups 0 and 1: not staged")
}
