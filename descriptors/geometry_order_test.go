package descriptors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

// A geometry's Order reaches the layouts it builds, Check wants it of a
// rank's layout ("" and HND are one order), and GeometryOf reads it back.
func TestGeometryOrder(t *testing.T) {
	g := geom()
	g.Order = OrderNHD
	buf := nixl.Desc{Addr: 0x100000, Len: g.RankBytes()}
	l, err := g.Layout(nixl.DRAM, 0, buf)
	require.NoError(t, err)
	assert.Equal(t, OrderNHD, l.Order)
	at, err := g.LayoutAt(nixl.DRAM, 0, 0, []uint64{0x100000, 0x200000, 0x300000, 0x400000})
	require.NoError(t, err)
	assert.Equal(t, OrderNHD, at.Order)
	require.NoError(t, g.Check(l))
	assert.Equal(t, g, GeometryOf(l))

	hnd := geom()
	err = hnd.Check(l)
	require.ErrorIs(t, err, ErrInvalid)
	assert.EqualError(t, err, `descriptors: Layout.Order is "NHD", the geometry's is "HND"`)
	err = g.Check(mustLayout(t, hnd))
	assert.EqualError(t, err, `descriptors: Layout.Order is "HND", the geometry's is "NHD"`)

	// "" and "HND" are the same order either way round.
	explicit := geom()
	explicit.Order = OrderHND
	plain := mustLayout(t, hnd)
	assert.Empty(t, plain.Order, "an HND geometry's layout encodes as before Order existed")
	require.NoError(t, explicit.Check(plain))
	require.NoError(t, hnd.Check(mustLayout(t, explicit)))

	// Geometry stays comparable.
	assert.True(t, g == GeometryOf(l))
	assert.False(t, g == hnd)
}

func TestGeometryOrderValidate(t *testing.T) {
	g := geom()
	g.Order = "LBNHC"
	err := g.Validate()
	require.ErrorIs(t, err, ErrInvalid)
	assert.EqualError(t, err, `descriptors: Geometry.Order is "LBNHC", want "HND" or "NHD" ("" is "HND")`)
	_, err = g.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x1000, Len: 1 << 30})
	assert.EqualError(t, err, `descriptors: Geometry.Order is "LBNHC", want "HND" or "NHD" ("" is "HND")`)
}

// Pipeline stages and groups carry the order too.
func TestGeometryOrderStagesAndGroups(t *testing.T) {
	g := geom()
	g.Layers, g.PPSize, g.Order = 4, 2, OrderNHD
	l, err := g.StageLayout(nixl.DRAM, 1, 0, nixl.Desc{Addr: 0x100000, Len: g.StageBytes(1)})
	require.NoError(t, err)
	assert.Equal(t, OrderNHD, l.Order)
	require.NoError(t, g.Check(l))
	l.Order = ""
	assert.EqualError(t, g.Check(l), `descriptors: Layout.Order is "HND", the geometry's is "NHD"`)

	sw := Geometry{Layers: 2, KVHeads: 2, HeadDim: 8, DType: "bfloat16", BlockSize: 4, Blocks: 8, TPSize: 1, Order: OrderNHD,
		Groups: &[]GroupGeometry{{Kind: KindFull, Layers: 1}, {Kind: KindSlidingWindow, Layers: 1, Window: 8}}}
	gl, err := sw.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x100000, Len: sw.RankBytes()})
	require.NoError(t, err)
	assert.Equal(t, OrderNHD, gl.Order)
	require.NoError(t, sw.Check(gl))
}

func mustLayout(t *testing.T, g Geometry) Layout {
	t.Helper()
	l, err := g.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x100000, Len: g.RankBytes()})
	require.NoError(t, err)
	return l
}
