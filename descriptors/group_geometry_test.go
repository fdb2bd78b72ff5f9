package descriptors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

func hybridGeometry() Geometry {
	return Geometry{Layers: 3, KVHeads: 4, HeadDim: 2, DType: "bfloat16", BlockSize: 4, Blocks: 8, TPSize: 2,
		Groups: &[]GroupGeometry{
			{Kind: KindFull, Layers: 1},
			{Kind: KindSlidingWindow, Layers: 1, Window: 8},
			{Kind: KindSSM, Layers: 1, Conv: []int{8, 4, 4}, State: 16},
		}}
}

// A grouped geometry places its regions group after group, each of its own
// size, and every layout it builds checks against it and maps back to it.
func TestGroupGeometryLayout(t *testing.T) {
	g := hybridGeometry()
	require.NoError(t, g.Validate())
	// Attention regions: 8 blocks x 4 tokens x 2 heads x 4 bytes = 256;
	// SSM: 8 slots x (4+2+2+8) = 128.
	assert.Equal(t, uint64(4*256+128), g.RankBytes())
	l, err := g.Layout(nixl.DRAM, 1, nixl.Desc{Addr: 1 << 20, Len: g.RankBytes()})
	require.NoError(t, err)
	assert.Equal(t, []Region{{Base: 1 << 20}, {Base: 1<<20 + 256}, {Base: 1<<20 + 512}, {Base: 1<<20 + 768}, {Base: 1<<20 + 1024}}, l.Regions)
	assert.Equal(t, []Group{
		{Kind: KindFull, Regions: []int{0, 1}},
		{Kind: KindSlidingWindow, Regions: []int{2, 3}, Window: 8},
		{Kind: KindSSM, Regions: []int{4}, SSM: &SSMState{Conv: []int{4, 2, 2}, State: 8}},
	}, l.Groups)
	require.NoError(t, g.Check(l))
	assert.Equal(t, g, GeometryOf(l))
	assert.Equal(t, uint64(128), l.RegionLenOf(4))
	assert.Equal(t, uint64(16), l.BlockLenOf(4))

	at, err := g.LayoutAt(nixl.DRAM, 0, 0, []uint64{0x1000, 0x2000, 0x3000, 0x4000, 0x5000})
	require.NoError(t, err)
	require.NoError(t, g.Check(at))

	other := g
	gs := cloneGroups(*g.Groups)
	gs[1].Window = 16
	other.Groups = &gs
	assert.EqualError(t, other.Check(l), "descriptors: Layout.Groups[1] is {Kind sliding_window, Regions [2 3], Window 8}, the geometry's is {Kind sliding_window, Regions [2 3], Window 16}")
}

func TestGroupGeometryValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(g *Geometry)
		msg    string
	}{
		{"layers do not add up", func(g *Geometry) { g.Layers = 4 }, "descriptors: Geometry.Layers is 4, the groups' layers sum to 3"},
		{"window missing", func(g *Geometry) { (*g.Groups)[1].Window = 0 },
			"descriptors: Geometry.Groups[1].Window is 0, want in [1, 1073741824] for a sliding_window group"},
		{"state not split evenly", func(g *Geometry) { (*g.Groups)[2].State = 15 },
			"descriptors: Geometry.Groups[2].State is 15, want in [1, 1073741824] and a multiple of TPSize 2"},
		{"conv not split evenly", func(g *Geometry) { (*g.Groups)[2].Conv[1] = 3 },
			"descriptors: Geometry.Groups[2].Conv[1] is 3, want in [1, 1073741824] and a multiple of TPSize 2"},
		{"state on attention", func(g *Geometry) { (*g.Groups)[0].State = 2 },
			"descriptors: Geometry.Groups[0] is a full group with Conv [] and State 2, want none"},
		{"mla group", func(g *Geometry) { (*g.Groups)[0].Kind = KindMLA },
			`descriptors: Geometry.Groups[0].Kind is "mla": describe an MLA group in the Layout (Group.KVHeads, Group.HeadBytes)`},
		{"no layers", func(g *Geometry) { (*g.Groups)[0].Layers = 0 }, "descriptors: Geometry.Groups[0].Layers is 0, want in [1, 16384]"},
		{"mla flag", func(g *Geometry) { g.MLA = true },
			"descriptors: Geometry.MLA is set with Groups: describe an MLA group in the Layout (Group.KVHeads, Group.HeadBytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := hybridGeometry()
			gs := cloneGroups(*g.Groups)
			g.Groups = &gs
			tc.mutate(&g)
			err := g.Validate()
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tc.msg, err.Error())
		})
	}
}

// cloneGroups copies a group list deeply, so a test can change one.
func cloneGroups(gs []GroupGeometry) []GroupGeometry {
	out := append([]GroupGeometry(nil), gs...)
	for i := range out {
		out[i].Conv = append([]int(nil), out[i].Conv...)
	}
	return out
}
