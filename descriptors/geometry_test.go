package descriptors

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

// geom is the geometry most tests start from: 2 layers, 8 KV heads of
// head_dim 64 in bfloat16 (128 bytes), 4 blocks of 16 tokens, TP 1. One
// region of TP 1 is 4 x 16 x 8 x 128 = 0x10000 bytes.
func geom() Geometry {
	return Geometry{Layers: 2, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 4, TPSize: 1}
}

func TestDTypeBytes(t *testing.T) {
	for want, names := range map[int][]string{
		1: {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "uint8"},
		2: {"bfloat16", "bf16", "float16", "fp16", "half", "int16", "uint16"},
		4: {"float32", "fp32", "float", "int32", "uint32"},
		8: {"float64", "fp64", "double", "int64", "uint64"},
	} {
		for _, name := range names {
			n, err := DTypeBytes(name)
			require.NoError(t, err, name)
			assert.Equal(t, want, n, name)
		}
	}
	for _, name := range []string{"", "auto", "BFloat16", "torch.bfloat16", "nvfp4"} {
		n, err := DTypeBytes(name)
		assert.Zero(t, n)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Equal(t, "descriptors: unknown dtype \""+name+"\": set Geometry.ElemBytes to its size in bytes", err.Error())
	}
}

func TestGeometrySizes(t *testing.T) {
	mla := Geometry{Layers: 3, KVHeads: 1, HeadDim: 576, DType: "bfloat16", BlockSize: 16, Blocks: 4, TPSize: 8, MLA: true}
	repl := geom()
	repl.KVHeads, repl.TPSize = 2, 4
	tp2 := geom()
	tp2.TPSize = 2
	fp8 := geom()
	fp8.DType, fp8.ElemBytes = "e4m3_custom", 1
	for _, c := range []struct {
		name                string
		g                   Geometry
		heads, headBytes    int
		regionBytes, bytes_ uint64
	}{
		{"TP 1", geom(), 8, 128, 0x10000, 0x40000},
		{"TP 2", tp2, 4, 128, 0x8000, 0x20000},
		{"replicated", repl, 1, 128, 0x2000, 0x8000},
		{"MLA", mla, 1, 1152, 0x12000, 3 * 0x12000},
		{"ElemBytes", fp8, 8, 64, 0x8000, 0x20000},
	} {
		require.NoError(t, c.g.Validate(), c.name)
		assert.Equal(t, c.heads, c.g.RankHeads(), c.name)
		assert.Equal(t, c.headBytes, c.g.HeadBytes(), c.name)
		assert.Equal(t, c.regionBytes, c.g.RegionBytes(), c.name)
		assert.Equal(t, c.bytes_, c.g.RankBytes(), c.name)
	}

	// Unusable geometries give 0, never a wrapped number or a panic.
	var zero Geometry
	assert.Zero(t, zero.RankHeads())
	assert.Zero(t, zero.HeadBytes())
	assert.Zero(t, zero.RegionBytes())
	assert.Zero(t, zero.RankBytes())
	unknown := geom()
	unknown.DType = "auto"
	assert.Zero(t, unknown.HeadBytes())
	assert.Zero(t, unknown.RankBytes())
	huge := Geometry{Layers: math.MaxInt, KVHeads: math.MaxInt, HeadDim: math.MaxInt, ElemBytes: math.MaxInt,
		BlockSize: math.MaxInt, Blocks: math.MaxInt, TPSize: 1}
	assert.Equal(t, math.MaxInt, huge.RankHeads())
	assert.Zero(t, huge.HeadBytes())
	assert.Zero(t, huge.RegionBytes())
	assert.Zero(t, huge.RankBytes())
	neg := geom()
	neg.ElemBytes = -2
	assert.Zero(t, neg.HeadBytes())
}

func TestGeometryValidate(t *testing.T) {
	require.NoError(t, geom().Validate())
	for _, c := range []struct {
		name string
		edit func(*Geometry)
		want string
	}{
		{"no layers", func(g *Geometry) { g.Layers = 0 }, "Geometry.Layers is 0, want >= 1"},
		{"too many layers", func(g *Geometry) { g.Layers = MaxLayers + 1 }, "Geometry.Layers is 16385, want <= 16384"},
		{"no heads", func(g *Geometry) { g.KVHeads = 0 }, "Geometry.KVHeads is 0, want >= 1"},
		{"negative heads", func(g *Geometry) { g.KVHeads = -8 }, "Geometry.KVHeads is -8, want >= 1"},
		{"no head dim", func(g *Geometry) { g.HeadDim = 0 }, "Geometry.HeadDim is 0, want >= 1"},
		{"huge head dim", func(g *Geometry) { g.HeadDim = maxField + 1 }, "Geometry.HeadDim is 1073741825, want <= 1073741824"},
		{"no dtype", func(g *Geometry) { g.DType = "" }, `Geometry.DType is empty, want an element type name such as "bfloat16"`},
		{"no dtype but ElemBytes", func(g *Geometry) { g.DType, g.ElemBytes = "", 2 }, `Geometry.DType is empty, want an element type name such as "bfloat16"`},
		{"negative ElemBytes", func(g *Geometry) { g.ElemBytes = -1 }, "Geometry.ElemBytes is -1, want >= 0 (0: the size of DType)"},
		{"huge ElemBytes", func(g *Geometry) { g.ElemBytes = maxField + 1 }, "Geometry.ElemBytes is 1073741825, want <= 1073741824"},
		{"unknown dtype", func(g *Geometry) { g.DType = "auto" },
			`Geometry.DType "auto" is not a dtype DTypeBytes knows: set Geometry.ElemBytes to its size in bytes`},
		{"no block size", func(g *Geometry) { g.BlockSize = 0 }, "Geometry.BlockSize is 0, want >= 1"},
		{"huge block size", func(g *Geometry) { g.BlockSize = maxField + 1 }, "Geometry.BlockSize is 1073741825, want <= 1073741824"},
		{"no blocks", func(g *Geometry) { g.Blocks = -1 }, "Geometry.Blocks is -1, want >= 1"},
		{"no TP", func(g *Geometry) { g.TPSize = 0 }, "Geometry.TPSize is 0, want >= 1"},
		{"huge TP", func(g *Geometry) { g.TPSize = maxTP + 1 }, "Geometry.TPSize is 65537, want <= 65536"},
		{"heads do not split", func(g *Geometry) { g.TPSize = 3 }, "Geometry.KVHeads is 8, want a multiple of TPSize 3"},
		{"replication uneven", func(g *Geometry) { g.KVHeads, g.TPSize = 4, 6 },
			"Geometry.TPSize is 6, want a multiple of KVHeads 4: with more ranks than KV heads every head is replicated on TPSize/KVHeads ranks"},
		{"too many heads per rank", func(g *Geometry) { g.KVHeads = 1 << 31 },
			"Geometry.KVHeads is 2147483648, 2147483648 per rank, want <= 1073741824 per rank"},
		{"too many MLA heads", func(g *Geometry) { g.KVHeads, g.TPSize, g.MLA = 1<<31, 2, true },
			"Geometry.KVHeads is 2147483648, 2147483648 per rank, want <= 1073741824 per rank"},
		{"huge head", func(g *Geometry) { g.HeadDim, g.DType = maxField, "float32" },
			"Geometry.HeadDim 1073741824 x 4 bytes is 4294967296 bytes per head, want <= 1073741824"},
		{"too many descriptors", func(g *Geometry) { g.Blocks = maxDescs/4 + 1 },
			"Geometry.Blocks is 536870913, want <= 536870912: 4 regions x Blocks must not exceed 2147483648 descriptors"},
		{"region overflows", func(g *Geometry) {
			*g = Geometry{Layers: 1, KVHeads: 1 << 10, HeadDim: 1 << 10, DType: "int8", BlockSize: 1 << 30, Blocks: 1 << 28, TPSize: 1}
		}, "Geometry.Blocks 268435456 x BlockSize 1073741824 x 1024 heads per rank x 1024 bytes per head (RegionBytes) overflows 64 bits"},
		{"rank overflows", func(g *Geometry) {
			*g = Geometry{Layers: 2, KVHeads: 1 << 10, HeadDim: 1 << 20, DType: "int8", BlockSize: 1 << 30, Blocks: 4, TPSize: 1}
		}, "Geometry.Layers 2: 4 regions x RegionBytes 4611686018427387904 (RankBytes) overflows 64 bits"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := geom()
			c.edit(&g)
			err := g.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, "descriptors: "+c.want, err.Error())
			_, err2 := g.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x1000, Len: math.MaxUint64 - 0x1000})
			assert.Equal(t, err, err2, "Layout refuses what Validate refuses")
			assert.Equal(t, err, g.Check(Layout{}), "Check refuses what Validate refuses")
		})
	}

	// The same sizes just inside the limits are fine.
	ok := []Geometry{
		{Layers: 1, KVHeads: 1 << 10, HeadDim: 1 << 10, DType: "int8", BlockSize: 1 << 30, Blocks: 1 << 12, TPSize: 1},
		{Layers: 2, KVHeads: 1 << 10, HeadDim: 1 << 20, DType: "int8", BlockSize: 1 << 30, Blocks: 4, TPSize: 1, MLA: true},
		{Layers: 2, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: maxDescs / 4, TPSize: 1},
		{Layers: MaxLayers, KVHeads: 1, HeadDim: 1, DType: "nvfp4", ElemBytes: 1, BlockSize: 1, Blocks: 1, TPSize: maxTP},
		{Layers: 1, KVHeads: 3, HeadDim: 5, DType: "float32", ElemBytes: 7, BlockSize: 1, Blocks: 1, TPSize: 6, MLA: true},
	}
	for _, g := range ok {
		assert.NoError(t, g.Validate(), "%+v", g)
		assert.NotZero(t, g.RankBytes(), "%+v", g)
	}
	assert.Equal(t, uint64(1)<<63, ok[1].RankBytes())
}

// handBuilt lays regions out the way callers did before Geometry: region r
// at base + r*RegionLen.
func handBuilt(l Layout, base, dev uint64) Layout {
	for i := 0; i < l.NumRegions(); i++ {
		l.Regions = append(l.Regions, Region{Base: base + uint64(i)*l.RegionLen(), DevID: dev})
	}
	return l
}

func TestGeometryLayout(t *testing.T) {
	tp2 := geom()
	tp2.TPSize = 2
	repl := geom()
	repl.KVHeads, repl.TPSize = 2, 4
	mla := Geometry{Layers: 3, KVHeads: 1, HeadDim: 576, DType: "bfloat16", BlockSize: 16, Blocks: 4, TPSize: 8, MLA: true}
	custom := geom()
	custom.DType, custom.ElemBytes = "e4m3_custom", 1
	for _, c := range []struct {
		name string
		g    Geometry
		mem  nixl.MemType
		rank int
		buf  nixl.Desc
		want Layout
	}{
		{"TP 1", geom(), nixl.DRAM, 0, nixl.Desc{Addr: 0x100000, Len: 0x40000},
			Layout{Mem: nixl.DRAM, NumLayers: 2, NumBlocks: 4, BlockSize: 16, KVHeads: 8, HeadBytes: 128, DType: "bfloat16", TPSize: 1,
				Regions: []Region{{Base: 0x100000}, {Base: 0x110000}, {Base: 0x120000}, {Base: 0x130000}}}},
		{"TP 2 rank 1, buffer larger than needed", tp2, nixl.VRAM, 1, nixl.Desc{Addr: 0x7f00_0000_0000, Len: 0x30000, DevID: 1},
			Layout{Mem: nixl.VRAM, NumLayers: 2, NumBlocks: 4, BlockSize: 16, KVHeads: 4, HeadBytes: 128, DType: "bfloat16", TPRank: 1, TPSize: 2,
				Regions: []Region{{Base: 0x7f00_0000_0000, DevID: 1}, {Base: 0x7f00_0000_8000, DevID: 1},
					{Base: 0x7f00_0001_0000, DevID: 1}, {Base: 0x7f00_0001_8000, DevID: 1}}}},
		{"replicated heads TP 4 rank 3", repl, nixl.VRAM, 3, nixl.Desc{Addr: 0x2_0000_0000, Len: 0x8000, DevID: 3},
			Layout{Mem: nixl.VRAM, NumLayers: 2, NumBlocks: 4, BlockSize: 16, KVHeads: 1, ModelKVHeads: 2, HeadBytes: 128, DType: "bfloat16",
				TPRank: 3, TPSize: 4,
				Regions: []Region{{Base: 0x2_0000_0000, DevID: 3}, {Base: 0x2_0000_2000, DevID: 3},
					{Base: 0x2_0000_4000, DevID: 3}, {Base: 0x2_0000_6000, DevID: 3}}}},
		{"MLA TP 8 rank 5", mla, nixl.VRAM, 5, nixl.Desc{Addr: 0x1000, Len: 3 * 0x12000, DevID: 5},
			Layout{Mem: nixl.VRAM, NumLayers: 3, NumBlocks: 4, BlockSize: 16, KVHeads: 1, HeadBytes: 1152, DType: "bfloat16", MLA: true,
				TPRank: 5, TPSize: 8,
				Regions: []Region{{Base: 0x1000, DevID: 5}, {Base: 0x13000, DevID: 5}, {Base: 0x25000, DevID: 5}}}},
		{"ElemBytes for an unknown dtype", custom, nixl.FILE, 0, nixl.Desc{Addr: 0, Len: 0x20000, DevID: 7},
			Layout{Mem: nixl.FILE, NumLayers: 2, NumBlocks: 4, BlockSize: 16, KVHeads: 8, HeadBytes: 64, DType: "e4m3_custom", TPSize: 1,
				Regions: []Region{{Base: 0, DevID: 7}, {Base: 0x8000, DevID: 7}, {Base: 0x10000, DevID: 7}, {Base: 0x18000, DevID: 7}}}},
		{"ends at the last address", geom(), nixl.DRAM, 0, nixl.Desc{Addr: math.MaxUint64 - 0x40000, Len: 0x40000},
			handBuilt(Layout{Mem: nixl.DRAM, NumLayers: 2, NumBlocks: 4, BlockSize: 16, KVHeads: 8, HeadBytes: 128, DType: "bfloat16", TPSize: 1},
				math.MaxUint64-0x40000, 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := c.g.Layout(c.mem, c.rank, c.buf)
			require.NoError(t, err)
			assert.Equal(t, c.want, l)
			// The same as the hand-written construction.
			hand := c.want
			hand.Regions = nil
			assert.Equal(t, handBuilt(hand, c.buf.Addr, c.buf.DevID), l)
			require.NoError(t, l.Validate())
			assert.Equal(t, c.g.RegionBytes(), l.RegionLen())
			assert.Equal(t, c.g.RankBytes(), uint64(l.NumRegions())*l.RegionLen())
			assert.Equal(t, c.g.KVHeads, l.TotalKVHeads())
			assert.NoError(t, c.g.Check(l))

			// LayoutAt with the same bases builds the same layout.
			bases := make([]uint64, len(l.Regions))
			for i, r := range l.Regions {
				bases[i] = r.Base
			}
			at, err := c.g.LayoutAt(c.mem, c.rank, c.buf.DevID, bases)
			require.NoError(t, err)
			assert.Equal(t, l, at)
			bases[0] = 1 // the layout owns its regions
			assert.Equal(t, c.want.Regions[0].Base, at.Regions[0].Base)
		})
	}
}

func TestGeometryLayoutErrors(t *testing.T) {
	buf := nixl.Desc{Addr: 0x100000, Len: 0x40000}
	for _, c := range []struct {
		name string
		mem  nixl.MemType
		rank int
		buf  nixl.Desc
		want string
	}{
		{"mem", nixl.MemType(5), 0, buf, "mem MemType(5) is not a NIXL memory type"},
		{"negative mem", nixl.MemType(-1), 0, buf, "mem MemType(-1) is not a NIXL memory type"},
		{"negative rank", nixl.DRAM, -1, buf, "tpRank is -1, want in [0, 1) (TPSize)"},
		{"rank too high", nixl.DRAM, 1, buf, "tpRank is 1, want in [0, 1) (TPSize)"},
		{"buffer too small", nixl.DRAM, 0, nixl.Desc{Addr: 0x100000, Len: 0x3ffff}, "buf.Len is 262143, want >= RankBytes 262144"},
		{"empty buffer", nixl.DRAM, 0, nixl.Desc{}, "buf.Len is 0, want >= RankBytes 262144"},
		{"past the address space", nixl.DRAM, 0, nixl.Desc{Addr: math.MaxUint64 - 0x3ffff, Len: 0x40000},
			"buf.Addr 0xfffffffffffc0000 + RankBytes 262144 overflows 64 bits"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := geom().Layout(c.mem, c.rank, c.buf)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, "descriptors: "+c.want, err.Error())
			assert.Equal(t, Layout{}, l)
		})
	}
}

func TestGeometryLayoutAt(t *testing.T) {
	g := geom()
	g.TPSize = 2
	// Regions in any order, with gaps, as an allocator hands them out.
	l, err := g.LayoutAt(nixl.VRAM, 0, 2, []uint64{0x90000, 0x10000, 0x50000, 0x30000})
	require.NoError(t, err)
	assert.Equal(t, Layout{Mem: nixl.VRAM, NumLayers: 2, NumBlocks: 4, BlockSize: 16, KVHeads: 4, HeadBytes: 128, DType: "bfloat16",
		TPSize: 2, Regions: []Region{{Base: 0x90000, DevID: 2}, {Base: 0x10000, DevID: 2}, {Base: 0x50000, DevID: 2}, {Base: 0x30000, DevID: 2}}}, l)
	assert.NoError(t, g.Check(l))

	mla := Geometry{Layers: 3, KVHeads: 1, HeadDim: 576, DType: "bfloat16", BlockSize: 16, Blocks: 4, TPSize: 2, MLA: true}
	for _, c := range []struct {
		name  string
		g     Geometry
		mem   nixl.MemType
		rank  int
		bases []uint64
		want  string
	}{
		{"too few bases", g, nixl.VRAM, 0, []uint64{0, 0x10000, 0x20000}, "len(bases) is 3, want 4: 2 per layer (K and V) for 2 layers"},
		{"no bases", g, nixl.VRAM, 0, nil, "len(bases) is 0, want 4: 2 per layer (K and V) for 2 layers"},
		{"MLA bases per K and V", mla, nixl.VRAM, 0, []uint64{0, 0x20000, 0x40000, 0x60000}, "len(bases) is 4, want 3: 1 per layer (MLA) for 3 layers"},
		{"base past the address space", g, nixl.VRAM, 0, []uint64{0, 0x10000, math.MaxUint64 - 0x7fff, 0x20000},
			"bases[2] 0xffffffffffff8000 + RegionBytes 32768 overflows 64 bits"},
		{"overlap", g, nixl.VRAM, 0, []uint64{0, 0x8000, 0xc000, 0x40000},
			"Regions[1] (base 0x8000) and Regions[2] (base 0xc000) overlap on device 2 (region length 32768)"},
		{"rank", g, nixl.VRAM, 2, []uint64{0, 0x10000, 0x20000, 0x30000}, "tpRank is 2, want in [0, 2) (TPSize)"},
		{"mem", g, nixl.MemType(7), 0, []uint64{0, 0x10000, 0x20000, 0x30000}, "mem MemType(7) is not a NIXL memory type"},
		{"geometry", Geometry{}, nixl.VRAM, 0, nil, "Geometry.Layers is 0, want >= 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := c.g.LayoutAt(c.mem, c.rank, 2, c.bases)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, "descriptors: "+c.want, err.Error())
			assert.Equal(t, Layout{}, l)
		})
	}
}

func TestGeometryCheck(t *testing.T) {
	g := geom()
	g.TPSize = 2
	good, err := g.Layout(nixl.VRAM, 1, nixl.Desc{Addr: 0x10000, Len: 0x20000, DevID: 1})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		edit func(*Layout)
		want string // "" for accepted
	}{
		{"as built", func(*Layout) {}, ""},
		{"other rank", func(l *Layout) { l.TPRank = 0 }, ""},
		{"other memory and devices", func(l *Layout) { l.Mem = nixl.DRAM; l.Regions[2].DevID = 9 }, ""},
		{"explicit ModelKVHeads", func(l *Layout) { l.ModelKVHeads = 8 }, ""},
		{"MLA", func(l *Layout) { l.MLA = true }, "Layout.MLA is true, the geometry's is false"},
		{"DType", func(l *Layout) { l.DType = "float16" }, `Layout.DType is "float16", the geometry's is "bfloat16"`},
		{"NumLayers", func(l *Layout) { l.NumLayers = 3 }, "Layout.NumLayers is 3, the geometry's is 2"},
		{"NumBlocks", func(l *Layout) { l.NumBlocks = 5 }, "Layout.NumBlocks is 5, the geometry's is 4"},
		{"BlockSize", func(l *Layout) { l.BlockSize = 32 }, "Layout.BlockSize is 32, the geometry's is 16"},
		{"HeadBytes", func(l *Layout) { l.HeadBytes = 256 }, "Layout.HeadBytes is 256, the geometry's is 128 (HeadDim 64 x 2 bytes)"},
		{"TPSize", func(l *Layout) { l.TPSize = 4 }, "Layout.TPSize is 4, the geometry's is 2"},
		{"KVHeads", func(l *Layout) { l.KVHeads = 2 }, "Layout.KVHeads is 2, the geometry's is 4 per rank"},
		{"ModelKVHeads", func(l *Layout) { l.ModelKVHeads = 6 }, "Layout.ModelKVHeads is 6, the geometry's is 8"},
		{"TPRank", func(l *Layout) { l.TPRank = 2 }, "TPRank 2 out of range [0, 2)"},
		{"Mem", func(l *Layout) { l.Mem = nixl.MemType(9) }, "Mem MemType(9) is not a NIXL memory type"},
		{"Regions", func(l *Layout) { l.Regions = l.Regions[:3] }, "len(Regions) 3, want 4: 2 per layer (K and V) for 2 layers"},
		{"overlap", func(l *Layout) { l.Regions[3].Base = l.Regions[2].Base + 1 },
			"Regions[2] (base 0x20000) and Regions[3] (base 0x20001) overlap on device 1 (region length 32768)"},
		{"first field wins", func(l *Layout) { l.BlockSize, l.NumLayers = 32, 3 }, "Layout.NumLayers is 3, the geometry's is 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := good
			l.Regions = append([]Region(nil), good.Regions...)
			c.edit(&l)
			err := g.Check(l)
			if c.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, "descriptors: "+c.want, err.Error())
		})
	}

	// Replicated heads: ModelKVHeads must be set, to the model's heads.
	repl := geom()
	repl.KVHeads, repl.TPSize = 2, 4
	rl, err := repl.Layout(nixl.VRAM, 2, nixl.Desc{Len: repl.RankBytes()})
	require.NoError(t, err)
	require.NoError(t, repl.Check(rl))
	rl.ModelKVHeads = 0
	assert.EqualError(t, repl.Check(rl), "descriptors: Layout.ModelKVHeads is 0, the geometry's is 2")
	rl.ModelKVHeads = 1
	assert.EqualError(t, repl.Check(rl), "descriptors: Layout.ModelKVHeads is 1, the geometry's is 2")

	// MLA ignores ModelKVHeads, as Layout does.
	mla := Geometry{Layers: 3, KVHeads: 1, HeadDim: 576, DType: "bfloat16", BlockSize: 16, Blocks: 4, TPSize: 2, MLA: true}
	ml, err := mla.Layout(nixl.VRAM, 1, nixl.Desc{Len: mla.RankBytes()})
	require.NoError(t, err)
	ml.ModelKVHeads = 5
	assert.NoError(t, mla.Check(ml))
	// A geometry that does not validate checks nothing.
	bad := geom()
	bad.HeadDim = 0
	assert.EqualError(t, bad.Check(good), "descriptors: Geometry.HeadDim is 0, want >= 1")
}

func TestGeometryOf(t *testing.T) {
	repl := geom()
	repl.KVHeads, repl.TPSize = 2, 4
	tp2 := geom()
	tp2.TPSize = 2
	mla := Geometry{Layers: 3, KVHeads: 1, HeadDim: 576, DType: "float8_e4m3fn", BlockSize: 16, Blocks: 4, TPSize: 8, MLA: true}
	// Every rank of these geometries round-trips exactly.
	for _, g := range []Geometry{geom(), tp2, repl, mla} {
		for rank := 0; rank < g.TPSize; rank++ {
			l, err := g.Layout(nixl.VRAM, rank, nixl.Desc{Addr: 0x1000, Len: g.RankBytes(), DevID: uint64(rank)})
			require.NoError(t, err)
			assert.Equal(t, g, GeometryOf(l))
			assert.NoError(t, GeometryOf(l).Check(l))
		}
	}

	// Layouts written by hand, as before Geometry.
	hand := handBuilt(Layout{Mem: nixl.VRAM, NumLayers: 2, NumBlocks: 1024, BlockSize: 16, KVHeads: 2, HeadBytes: 256,
		DType: "bfloat16", TPRank: 3, TPSize: 4}, 0x70_0000_0000, 3)
	require.NoError(t, hand.Validate())
	assert.Equal(t, Geometry{Layers: 2, KVHeads: 8, HeadDim: 128, DType: "bfloat16", BlockSize: 16, Blocks: 1024, TPSize: 4}, GeometryOf(hand))
	assert.NoError(t, GeometryOf(hand).Check(hand))
	hand.ModelKVHeads = 8 // explicit, same model
	assert.Equal(t, 8, GeometryOf(hand).KVHeads)
	assert.NoError(t, GeometryOf(hand).Check(hand))

	// A dtype DTypeBytes does not know, or one that does not divide
	// HeadBytes: one-byte elements, HeadDim = HeadBytes.
	for _, c := range []struct {
		dtype     string
		headBytes int
	}{{"auto", 256}, {"bfloat16", 129}, {"float32", 2}} {
		l := handBuilt(Layout{Mem: nixl.DRAM, NumLayers: 1, NumBlocks: 2, BlockSize: 4, KVHeads: 1, ModelKVHeads: 1,
			HeadBytes: c.headBytes, DType: c.dtype, TPSize: 2}, 0, 0)
		require.NoError(t, l.Validate())
		g := GeometryOf(l)
		assert.Equal(t, Geometry{Layers: 1, KVHeads: 1, HeadDim: c.headBytes, DType: c.dtype, ElemBytes: 1, BlockSize: 4,
			Blocks: 2, TPSize: 2}, g, c.dtype)
		assert.NoError(t, g.Check(l), c.dtype)
	}

	// Invalid layouts give a geometry that Validate refuses, never a panic.
	assert.Error(t, GeometryOf(Layout{}).Validate())
	assert.Error(t, GeometryOf(Layout{NumLayers: -1, HeadBytes: -3, KVHeads: math.MaxInt, TPSize: math.MaxInt, DType: "int8"}).Validate())
}

var fuzzDTypes = []string{"bfloat16", "float8_e4m3fn", "float32", "int8", "", "auto", "float64", "fp8"}

// FuzzGeometry feeds arbitrary integers to Geometry: nothing panics, Layout
// succeeds exactly when its documented conditions hold, and a layout it
// returns validates, matches the geometry and lies inside buf.
func FuzzGeometry(f *testing.F) {
	f.Add(false, 2, 8, 64, 0, 16, 4, 1, 0, uint8(0), uint64(0x1000), uint64(0x40000), uint64(0), int8(0))
	f.Add(false, 2, 2, 64, 0, 16, 4, 4, 3, uint8(0), uint64(0x1000), uint64(0x8000), uint64(3), int8(1))
	f.Add(true, 3, 1, 576, 0, 16, 4, 8, 5, uint8(1), uint64(0), uint64(0x12000), uint64(5), int8(1))
	f.Add(false, 1, 3, 5, 3, 1, 1, 3, 2, uint8(5), uint64(0), uint64(45), uint64(0), int8(4))
	f.Add(false, 2, 8, 64, 0, 16, 4, 1, 0, uint8(0), uint64(math.MaxUint64-0x40000), uint64(0x40000), uint64(0), int8(0))
	f.Add(false, 2, 1<<10, 1<<20, 0, 1<<30, 4, 1, 0, uint8(3), uint64(0), uint64(math.MaxUint64), uint64(0), int8(0))
	f.Add(true, math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt,
		uint8(2), uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(math.MaxUint64), int8(-1))
	f.Add(false, -1, -1, -1, -1, -1, -1, -1, -1, uint8(4), uint64(0), uint64(0), uint64(0), int8(9))
	f.Fuzz(func(t *testing.T, mla bool, layers, heads, headDim, elemBytes, blockSize, blocks, tp, rank int,
		dtype uint8, addr, length, devID uint64, mem int8) {
		g := Geometry{Layers: layers, KVHeads: heads, HeadDim: headDim, DType: fuzzDTypes[int(dtype)%len(fuzzDTypes)],
			ElemBytes: elemBytes, BlockSize: blockSize, Blocks: blocks, TPSize: tp, MLA: mla}
		checkGeometry(t, g, nixl.MemType(mem), rank, nixl.Desc{Addr: addr, Len: length, DevID: devID})
	})
}

// TestGeometryProperty runs the fuzz invariants over random small
// geometries, most of them valid, so that the success path is well covered
// without the fuzzer.
func TestGeometryProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	valid := 0
	for i := 0; i < 20000; i++ {
		heads := pick(rng, 1, 2, 3, 4, 8, 16)
		g := Geometry{Layers: pick(rng, 0, 1, 2, 3, 4, 5, 6, 7, 8, 61), KVHeads: heads, HeadDim: pick(rng, 0, 1, 64, 128, 128, 576),
			DType: pick(rng, fuzzDTypes...), ElemBytes: pick(rng, 0, 0, 0, 0, 0, 0, 1, 3, -1), BlockSize: pick(rng, 0, 1, 16, 16, 32),
			Blocks: pick(rng, 0, 1, 2, 3, 5, 8, 9, 64), TPSize: pick(rng, 0, 1, 1, 2, 2, 4, 4, 8, 6), MLA: rng.IntN(4) == 0, KVPacked: rng.IntN(3) == 0}
		if rng.IntN(2) == 0 {
			g.DType = pick(rng, "bfloat16", "float8_e4m3fn", "float32")
		}
		rank := rng.IntN(g.TPSize+2) - 1
		if rng.IntN(2) == 0 {
			rank = rng.IntN(max(g.TPSize, 1))
		}
		// Buffers that fit, are larger, end at the last address, pass it, or
		// (+MaxUint64 wraps to -1) are one byte short.
		size := g.RankBytes()
		buf := nixl.Desc{Addr: pick[uint64](rng, 0, 0x1000, 0x7f00_0000_0000, math.MaxUint64-size, math.MaxUint64-size+1, rng.Uint64()),
			Len: size + pick[uint64](rng, 0, 0, 0, 1, 4096, math.MaxUint64), DevID: uint64(rng.IntN(3))}
		if checkGeometry(t, g, pick(rng, nixl.DRAM, nixl.VRAM, nixl.VRAM, nixl.FILE, nixl.MemType(5)), rank, buf) {
			valid++
		}
	}
	t.Logf("%d layouts built", valid)
	assert.Greater(t, valid, 2000, "layouts built") // about 1 in 7
}

// checkGeometry checks the invariants of one geometry and one Layout call:
// nothing panics, Layout succeeds exactly when its documented conditions
// hold, and a layout it returns validates, matches the geometry and lies
// inside buf. It reports whether Layout succeeded.
func checkGeometry(t *testing.T, g Geometry, mem nixl.MemType, rank int, buf nixl.Desc) bool {
	t.Helper()
	addr, length, devID := buf.Addr, buf.Len, buf.DevID
	blocks, blockSize, heads, tp := g.Blocks, g.BlockSize, g.KVHeads, g.TPSize
	verr := g.Validate()
	heads0, head, region, size := g.RankHeads(), g.HeadBytes(), g.RegionBytes(), g.RankBytes()
	_ = GeometryOf(Layout{NumLayers: g.Layers, KVHeads: heads, ModelKVHeads: tp, HeadBytes: g.HeadDim, DType: g.DType, TPSize: tp, MLA: g.MLA})
	l, err := g.Layout(mem, rank, buf)
	if verr != nil {
		if err == nil || err.Error() != verr.Error() {
			t.Fatalf("Validate: %v, Layout: %v", verr, err)
		}
		if g.Check(l) == nil {
			t.Fatal("Check accepted a layout of an invalid geometry")
		}
		return false
	}
	if heads0 < 1 || head < 1 || region == 0 || size == 0 || size/region != g.numRegions() || size%region != 0 ||
		region/uint64(head) != uint64(blocks)*uint64(blockSize)*uint64(heads0) || region%uint64(head) != 0 {
		t.Fatalf("sizes of a valid geometry: heads %d head %d region %d rank %d", heads0, head, region, size)
	}
	carry := addr > math.MaxUint64-size // the cache would pass the last address
	want := mem >= nixl.DRAM && mem <= nixl.FILE && rank >= 0 && rank < tp && length >= size && !carry
	if (err == nil) != want {
		t.Fatalf("Layout error %v, expected success %v", err, want)
	}
	if err != nil {
		return false
	}
	if verr := l.Validate(); verr != nil {
		t.Fatalf("Layout gave a layout that does not validate: %v", verr)
	}
	if cerr := g.Check(l); cerr != nil {
		t.Fatalf("Check of the geometry's own layout: %v", cerr)
	}
	if cerr := GeometryOf(l).Check(l); cerr != nil {
		t.Fatalf("GeometryOf round trip: %v", cerr)
	}
	if l.RegionLen() != region || l.KVHeads != heads0 || l.HeadBytes != head || l.TotalKVHeads() != heads {
		t.Fatalf("layout sizes differ from the geometry's: %+v", l)
	}
	for i, r := range l.Regions {
		if r.DevID != devID || r.Base != addr+uint64(i)*region || r.Base < addr || r.Base-addr+region > length {
			t.Fatalf("Regions[%d] %+v outside buf %+v (region length %d)", i, r, buf, region)
		}
	}
	bases := make([]uint64, len(l.Regions))
	for i, r := range l.Regions {
		bases[i] = r.Base
	}
	at, err := g.LayoutAt(mem, rank, devID, bases)
	if err != nil || !assert.ObjectsAreEqual(l, at) {
		t.Fatalf("LayoutAt of the same bases: %v", err)
	}
	return true
}
