package descriptors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

// A packed geometry lays out one region per layer whose head-token holds K
// and V, and round-trips through GeometryOf.
func TestPackedGeometry(t *testing.T) {
	g := Geometry{Layers: 3, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 10, TPSize: 2, KVPacked: true}
	require.NoError(t, g.Validate())
	assert.Equal(t, 256, g.HeadBytes(), "64 elements of K and 64 of V, 2 bytes each")
	assert.Equal(t, uint64(3*10*16*4*256), g.RankBytes())
	l, err := g.Layout(nixl.DRAM, 1, nixl.Desc{Addr: 1 << 20, Len: g.RankBytes()})
	require.NoError(t, err)
	assert.True(t, l.KVPacked)
	assert.Equal(t, 3, l.NumRegions())
	assert.Len(t, l.Regions, 3)
	assert.Equal(t, uint64(16*4*256), l.BlockLen())
	require.NoError(t, g.Check(l))
	assert.Equal(t, g, GeometryOf(l))

	unpacked := g
	unpacked.KVPacked = false
	assert.EqualError(t, unpacked.Check(l), "descriptors: Layout.KVPacked is true, the geometry's is false")

	mla := g
	mla.MLA = true
	assert.EqualError(t, mla.Validate(), "descriptors: Geometry.MLA and Geometry.KVPacked are both set: an MLA layer has one latent cache, no K and V to pack")
	l.MLA = true
	assert.ErrorContains(t, l.Validate(), "MLA and KVPacked are both set")
}

// Packed layouts exchange blocks only with packed ones, and across TP
// sizes a decode rank's heads are one run of each packed block: the bytes
// of heads 2..3 of prefill's block (both K and V) land in decode rank 1.
func TestPackedMapping(t *testing.T) {
	pg := Geometry{Layers: 2, KVHeads: 4, HeadDim: 4, DType: "bfloat16", BlockSize: 2, Blocks: 8, TPSize: 1, KVPacked: true}
	dg := pg
	dg.TPSize = 2
	src, err := pg.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 1 << 20, Len: pg.RankBytes()})
	require.NoError(t, err)
	dst, err := dg.Layout(nixl.DRAM, 1, nixl.Desc{Addr: 1 << 24, Len: dg.RankBytes()})
	require.NoError(t, err)
	tr, err := Map(&src, &dst, []int{3}, []int{5})
	require.NoError(t, err)
	descs := struct{ Src, Dst []nixl.Desc }{tr.Src.Descs, tr.Dst.Descs}
	// One descriptor per layer: prefill block 3's heads 2 and 3 (K and V of
	// each, 2 tokens x 16 bytes per head) into decode block 5.
	headRun := uint64(2 * 16) // tokens x packed head bytes
	require.Len(t, descs.Src, 2)
	for r := range 2 {
		assert.Equal(t, src.Regions[r].Base+3*src.BlockLen()+2*headRun, descs.Src[r].Addr, "layer %d source", r)
		assert.Equal(t, dst.Regions[r].Base+5*dst.BlockLen(), descs.Dst[r].Addr, "layer %d destination", r)
		assert.Equal(t, 2*headRun, descs.Src[r].Len)
	}

	plain := dg
	plain.KVPacked = false
	other, err := plain.Layout(nixl.DRAM, 1, nixl.Desc{Addr: 1 << 24, Len: plain.RankBytes()})
	require.NoError(t, err)
	_, err = Map(&src, &other, []int{3}, []int{5})
	assert.ErrorIs(t, err, ErrIncompatible)
	assert.ErrorContains(t, err, "KVPacked differ")
}
