package descriptors_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/nixl"
)

// GroupSources names each group's source ranks; their union over the
// groups is Sources, for both grouped shapes at every TP pairing, and a
// layout without groups is its one group.
func TestGroupSources(t *testing.T) {
	mk := func(shape string, tp, rank int) descriptors.Layout {
		g := grouptest.Geometry(shape, tp, 16)
		l, err := g.Layout(nixl.DRAM, rank, nixl.Desc{Addr: 1 << 20, Len: g.RankBytes()})
		require.NoError(t, err)
		return l
	}
	for _, shape := range grouptest.Shapes {
		for _, tp := range [][2]int{{1, 1}, {2, 2}, {2, 1}, {1, 2}} {
			for d := range tp[1] {
				src, dst := mk(shape, tp[0], 0), mk(shape, tp[1], d)
				all, err := descriptors.Sources(&src, &dst)
				require.NoError(t, err)
				var union []int
				for gi := range dst.GroupList() {
					got, err := descriptors.GroupSources(&src, &dst, gi)
					require.NoError(t, err)
					require.NotEmpty(t, got)
					require.True(t, slices.IsSorted(got))
					union = append(union, got...)
				}
				slices.Sort(union)
				require.Equal(t, all, slices.Compact(union), "%s TP %d -> %d, decode rank %d", shape, tp[0], tp[1], d)
			}
		}
	}
	src, dst := mk("hybrid", 2, 0), mk("hybrid", 1, 0)
	for gi := range 2 {
		got, err := descriptors.GroupSources(&src, &dst, gi)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, got, "both ranks hold half of decode's heads and of its state")
	}
	_, err := descriptors.GroupSources(&src, &dst, 2)
	require.ErrorIs(t, err, descriptors.ErrInvalid)
	require.ErrorContains(t, err, "GroupSources: group 2 out of range [0, 2)")

	plain := descriptors.Layout{Mem: nixl.DRAM, NumLayers: 1, NumBlocks: 4, BlockSize: 16, KVHeads: 2, HeadBytes: 8, DType: "bfloat16", TPSize: 1,
		Regions: []descriptors.Region{{Base: 1 << 20}, {Base: 2 << 20}}}
	got, err := descriptors.GroupSources(&plain, &plain, 0)
	require.NoError(t, err)
	require.Equal(t, []int{0}, got)
}
