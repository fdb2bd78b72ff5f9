package descriptors

import (
	"math"
	"math/bits"

	"github.com/gonixl/gonixl/nixl"
)

// Geometry is a model's KV cache as one engine holds it: the facts an engine
// states once (layers, heads, head size, element type, block size, block
// count, tensor-parallel size), from which every rank's [Layout] follows.
// [Geometry.Layout] and [Geometry.LayoutAt] build a rank's layout without
// computing region addresses by hand; [Geometry.Check] tells whether a layout
// built elsewhere is one of this geometry.
//
// Heads are split the way vLLM splits them: with TPSize <= KVHeads each rank
// holds KVHeads/TPSize heads (TPSize must divide KVHeads); with more ranks
// than heads each rank holds 1 head, replicated on TPSize/KVHeads ranks
// (KVHeads must divide TPSize). With MLA the latent cache is replicated: every
// rank holds all KVHeads latent heads, whatever TPSize is.
type Geometry struct {
	Layers    int    // attention layers
	KVHeads   int    // the model's KV heads, over all TP ranks (MLA: the latent heads, replicated on every rank)
	HeadDim   int    // elements of one head for one token (MLA: the latent dim + rope dim)
	DType     string // element type name ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "int8", "uint8", "fp8" ...)
	ElemBytes int    // bytes of one element; 0 means DTypeBytes(DType)
	BlockSize int    // tokens per block
	Blocks    int    // blocks in every region of every rank
	TPSize    int    // tensor-parallel size
	MLA       bool   // multi-head latent attention: one region per layer, replicated KV
	KVPacked  bool   // K and V of a layer in one region, packed per head and token (vLLM's layout since connector version 12); never with MLA
	// Groups, when set, makes the model several KV-cache groups (see
	// [GroupGeometry]): Layers is then the sum of the groups' layers, the
	// attention groups use KVHeads, HeadDim and BlockSize, and each rank's
	// layout has one region per K, V (or packed) cache of an attention
	// layer and one per SSM layer, group after group, each with Blocks
	// blocks. MLA must be false. It is a pointer so that Geometry stays
	// comparable with == (engines test it against the zero value); two
	// geometries with groups are equal under == only when they share the
	// list, so compare them with reflect.DeepEqual.
	Groups *[]GroupGeometry
	// Order is the memory order inside an attention block of every rank
	// (see [Layout]): "" or OrderHND head-major, OrderNHD token-major
	// (vLLM's LBNHC). Layouts built from the geometry carry it, and
	// [Geometry.Check] wants it of a rank's layout ("" and OrderHND are
	// one order). An engine states it once because a peer must know it
	// before the first transfer: the connectors' handshake names an NHD
	// engine's layout so that a gonixl peer that predates Order refuses it.
	Order string
	// PPSize is the number of pipeline-parallel stages (0 or 1: none).
	// With more, Layers is the whole model's and each stage's ranks hold
	// a contiguous range of them: build a rank's layout with
	// [Geometry.StageLayout] ([Geometry.StageLayers] says which layers).
	// Not with Groups.
	PPSize int
}

// DTypeBytes returns the size in bytes of one element of the named type. It
// knows the PyTorch names (without "torch."), their short forms and vLLM's
// cache dtypes: 1 byte for "float8_e4m3fn", "float8_e4m3fnuz",
// "float8_e5m2", "float8_e5m2fnuz", "fp8", "fp8_e4m3", "fp8_e5m2", "int8",
// "uint8"; 2 for "bfloat16", "bf16", "float16", "fp16", "half", "int16",
// "uint16"; 4 for "float32", "fp32", "float", "int32", "uint32"; 8 for
// "float64", "fp64", "double", "int64", "uint64". Names are case-sensitive.
// For any other name it returns an error matching [ErrInvalid] that names the
// dtype: set [Geometry.ElemBytes] for it instead.
func DTypeBytes(dtype string) (int, error) {
	switch dtype {
	case "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
		"fp8", "fp8_e4m3", "fp8_e5m2", "int8", "uint8":
		return 1, nil
	case "bfloat16", "bf16", "float16", "fp16", "half", "int16", "uint16":
		return 2, nil
	case "float32", "fp32", "float", "int32", "uint32":
		return 4, nil
	case "float64", "fp64", "double", "int64", "uint64":
		return 8, nil
	}
	return 0, invalidf("unknown dtype %q: set Geometry.ElemBytes to its size in bytes", dtype)
}

// mul64 returns a*b and whether it fits 64 bits.
func mul64(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

// elemBytes returns ElemBytes, or DTypeBytes(DType) when it is 0; 0 when
// neither gives a positive size.
func (g Geometry) elemBytes() int {
	if g.ElemBytes != 0 {
		return max(g.ElemBytes, 0)
	}
	n, _ := DTypeBytes(g.DType)
	return n
}

// numRegions returns 2*Layers, or Layers with MLA or KVPacked; 0 for
// Layers < 1.
func (g Geometry) numRegions() uint64 {
	if g.Layers < 1 {
		return 0
	}
	if len(g.groups()) > 0 {
		return g.groupRegions()
	}
	if g.MLA || g.KVPacked {
		return uint64(g.Layers)
	}
	return 2 * uint64(g.Layers)
}

// replicated reports whether each rank holds one replicated head: more ranks
// than heads, without MLA.
func (g Geometry) replicated() bool { return !g.MLA && g.TPSize > g.KVHeads }

// RankHeads returns the KV heads one rank holds: KVHeads with MLA, 1 when
// TPSize > KVHeads (replicated heads), else KVHeads/TPSize. It is 0 when
// KVHeads or TPSize is below 1.
func (g Geometry) RankHeads() int {
	switch {
	case g.KVHeads < 1 || g.TPSize < 1:
		return 0
	case g.MLA:
		return g.KVHeads
	case g.replicated():
		return 1
	}
	return g.KVHeads / g.TPSize
}

// HeadBytes returns the bytes of one head for one token in a region:
// HeadDim times the element size (ElemBytes, or DTypeBytes(DType) when
// ElemBytes is 0), twice that with KVPacked (K and V). It is 0 when either is
// unusable or the product does not fit an int.
func (g Geometry) HeadBytes() int {
	e := g.elemBytes()
	if g.HeadDim < 1 || e < 1 {
		return 0
	}
	if g.KVPacked {
		e *= 2
	}
	n, ok := mul64(uint64(g.HeadDim), uint64(e))
	if !ok || n > math.MaxInt {
		return 0
	}
	return int(n)
}

// RegionBytes returns the bytes of one region (one layer's K, V or MLA
// latent cache on one rank): Blocks * BlockSize * RankHeads * HeadBytes. It
// is 0 when a factor is below 1 or the product overflows 64 bits.
func (g Geometry) RegionBytes() uint64 {
	if g.Blocks < 1 || g.BlockSize < 1 {
		return 0
	}
	n := uint64(g.Blocks)
	for _, f := range []int{g.BlockSize, g.RankHeads(), g.HeadBytes()} {
		var ok bool
		if n, ok = mul64(n, uint64(max(f, 0))); !ok {
			return 0
		}
	}
	return n
}

// RankBytes returns the bytes of one rank's whole KV cache: NumRegions
// (2*Layers, or Layers with MLA) times RegionBytes, the size of the buffer
// [Geometry.Layout] needs. It is 0 when a factor is 0 or the product
// overflows 64 bits, which [Geometry.Validate] refuses.
func (g Geometry) RankBytes() uint64 {
	if len(g.groups()) > 0 {
		return g.groupRankBytes()
	}
	n, ok := mul64(g.numRegions(), g.RegionBytes())
	if !ok {
		return 0
	}
	return n
}

// Validate reports the first field that makes the geometry unusable, in
// field order and then the combinations (heads against TPSize, descriptor
// count, sizes); the error matches [ErrInvalid] and names the field and its
// value, as in "Geometry.HeadDim is 0, want >= 1". A geometry that passes
// gives layouts that pass [Layout.Validate]: it bounds the fields the way
// Layout.Validate does and refuses a RegionBytes or RankBytes that overflows
// 64 bits.
func (g Geometry) Validate() error {
	switch {
	case g.Layers < 1:
		return invalidf("Geometry.Layers is %d, want >= 1", g.Layers)
	case g.Layers > MaxLayers:
		return invalidf("Geometry.Layers is %d, want <= %d", g.Layers, MaxLayers)
	case g.KVHeads < 1:
		return invalidf("Geometry.KVHeads is %d, want >= 1", g.KVHeads)
	case g.MLA && g.KVPacked:
		return invalidf("Geometry.MLA and Geometry.KVPacked are both set: an MLA layer has one latent cache, no K and V to pack")
	case g.HeadDim < 1:
		return invalidf("Geometry.HeadDim is %d, want >= 1", g.HeadDim)
	case g.HeadDim > maxField:
		return invalidf("Geometry.HeadDim is %d, want <= %d", g.HeadDim, maxField)
	case g.DType == "":
		return invalidf("Geometry.DType is empty, want an element type name such as %q", "bfloat16")
	case g.ElemBytes < 0:
		return invalidf("Geometry.ElemBytes is %d, want >= 0 (0: the size of DType)", g.ElemBytes)
	case g.ElemBytes > maxField:
		return invalidf("Geometry.ElemBytes is %d, want <= %d", g.ElemBytes, maxField)
	case g.Order != "" && g.Order != OrderHND && g.Order != OrderNHD:
		return invalidf("Geometry.Order is %q, want %q or %q (\"\" is %q)", g.Order, OrderHND, OrderNHD, OrderHND)
	}
	if g.ElemBytes == 0 {
		if _, err := DTypeBytes(g.DType); err != nil {
			return invalidf("Geometry.DType %q is not a dtype DTypeBytes knows: set Geometry.ElemBytes to its size in bytes", g.DType)
		}
	}
	switch {
	case g.BlockSize < 1:
		return invalidf("Geometry.BlockSize is %d, want >= 1", g.BlockSize)
	case g.BlockSize > maxField:
		return invalidf("Geometry.BlockSize is %d, want <= %d", g.BlockSize, maxField)
	case g.Blocks < 1:
		return invalidf("Geometry.Blocks is %d, want >= 1", g.Blocks)
	case g.TPSize < 1:
		return invalidf("Geometry.TPSize is %d, want >= 1", g.TPSize)
	case g.TPSize > maxTP:
		return invalidf("Geometry.TPSize is %d, want <= %d", g.TPSize, maxTP)
	case g.replicated() && g.TPSize%g.KVHeads != 0:
		return invalidf("Geometry.TPSize is %d, want a multiple of KVHeads %d: with more ranks than KV heads every head is replicated on TPSize/KVHeads ranks",
			g.TPSize, g.KVHeads)
	case !g.MLA && !g.replicated() && g.KVHeads%g.TPSize != 0:
		return invalidf("Geometry.KVHeads is %d, want a multiple of TPSize %d", g.KVHeads, g.TPSize)
	case g.RankHeads() > maxField:
		return invalidf("Geometry.KVHeads is %d, %d per rank, want <= %d per rank", g.KVHeads, g.RankHeads(), maxField)
	case g.HeadBytes() < 1 || g.HeadBytes() > maxField:
		return invalidf("Geometry.HeadDim %d x %d bytes is %d bytes per head, want <= %d",
			g.HeadDim, g.elemBytes(), uint64(g.HeadDim)*uint64(g.elemBytes()), maxField)
	}
	if err := g.validateStages(); err != nil {
		return err
	}
	if len(g.groups()) > 0 {
		if err := g.validateGroups(); err != nil {
			return err
		}
	}
	regions := g.numRegions()
	if limit := uint64(maxDescs) / regions; uint64(g.Blocks) > limit {
		return invalidf("Geometry.Blocks is %d, want <= %d: %d regions x Blocks must not exceed %d descriptors",
			g.Blocks, limit, regions, uint64(maxDescs))
	}
	region := g.RegionBytes()
	if region == 0 {
		return invalidf("Geometry.Blocks %d x BlockSize %d x %d heads per rank x %d bytes per head (RegionBytes) overflows 64 bits",
			g.Blocks, g.BlockSize, g.RankHeads(), g.HeadBytes())
	}
	if g.RankBytes() == 0 {
		return invalidf("Geometry.Layers %d: %d regions x RegionBytes %d (RankBytes) overflows 64 bits", g.Layers, regions, region)
	}
	return nil
}

// Layout returns the layout of rank tpRank with its regions back to back in
// buf: region r at buf.Addr + r*RegionBytes, every region with buf.DevID.
// buf may be longer than RankBytes; the rest is not used. It fails, with an
// error matching [ErrInvalid], when the geometry does not validate, mem is
// not a NIXL memory type, tpRank is outside [0, TPSize), buf.Len is below
// RankBytes, or the cache would pass the end of the 64-bit address space.
//
// For a [nixl.Buffer] pass buf.RegDesc().Desc; for GPU memory, a Desc of the
// allocation's address, length and device.
func (g Geometry) Layout(mem nixl.MemType, tpRank int, buf nixl.Desc) (Layout, error) {
	if err := g.layoutArgs(mem, tpRank); err != nil {
		return Layout{}, err
	}
	size, sizes := g.RankBytes(), g.regionSizes()
	if buf.Len < size {
		return Layout{}, invalidf("buf.Len is %d, want >= RankBytes %d", buf.Len, size)
	}
	if _, carry := bits.Add64(buf.Addr, size, 0); carry != 0 {
		return Layout{}, invalidf("buf.Addr %#x + RankBytes %d overflows 64 bits", buf.Addr, size)
	}
	l := g.layout(mem, tpRank)
	at := buf.Addr
	for i := range l.Regions {
		l.Regions[i] = Region{Base: at, DevID: buf.DevID}
		at += sizes[i]
	}
	return l, g.finish(&l)
}

// LayoutAt returns the layout of rank tpRank with one region at each of
// bases, in region order (layer-major: layer 0 K, layer 0 V, ...; one per
// layer with MLA), every region on device devID. len(bases) must be
// NumRegions: 2*Layers, or Layers with MLA. Besides the checks of
// [Geometry.Layout] it refuses a base whose region passes the end of the
// 64-bit address space, and regions that overlap (as [Layout.Validate] does).
func (g Geometry) LayoutAt(mem nixl.MemType, tpRank int, devID uint64, bases []uint64) (Layout, error) {
	if err := g.layoutArgs(mem, tpRank); err != nil {
		return Layout{}, err
	}
	if want := int(g.numRegions()); len(bases) != want {
		kind := "2 per layer (K and V)"
		switch {
		case len(g.groups()) > 0:
			kind = "the groups' regions"
		case g.MLA:
			kind = "1 per layer (MLA)"
		}
		return Layout{}, invalidf("len(bases) is %d, want %d: %s for %d layers", len(bases), want, kind, g.Layers)
	}
	sizes := g.regionSizes()
	l := g.layout(mem, tpRank)
	for i, b := range bases {
		if _, carry := bits.Add64(b, sizes[i], 0); carry != 0 {
			return Layout{}, invalidf("bases[%d] %#x + RegionBytes %d overflows 64 bits", i, b, sizes[i])
		}
		l.Regions[i] = Region{Base: b, DevID: devID}
	}
	return l, g.finish(&l)
}

// layoutArgs checks what Layout and LayoutAt share: the geometry, mem and
// tpRank.
func (g Geometry) layoutArgs(mem nixl.MemType, tpRank int) error {
	if err := g.Validate(); err != nil {
		return err
	}
	if g.PPSize > 1 {
		return invalidf("Geometry.PPSize is %d: a rank holds one stage's layers, build its layout with StageLayout", g.PPSize)
	}
	if mem < nixl.DRAM || mem > nixl.FILE {
		return invalidf("mem %v is not a NIXL memory type", mem)
	}
	if tpRank < 0 || tpRank >= g.TPSize {
		return invalidf("tpRank is %d, want in [0, %d) (TPSize)", tpRank, g.TPSize)
	}
	return nil
}

// layout returns rank tpRank's layout of a valid geometry with NumRegions
// zero regions.
func (g Geometry) layout(mem nixl.MemType, tpRank int) Layout {
	l := Layout{Mem: mem, Regions: make([]Region, g.numRegions()), NumLayers: g.Layers, NumBlocks: g.Blocks,
		BlockSize: g.BlockSize, KVHeads: g.RankHeads(), HeadBytes: g.HeadBytes(), DType: g.DType, MLA: g.MLA,
		KVPacked: g.KVPacked, TPRank: tpRank, TPSize: g.TPSize, Order: g.Order}
	if g.replicated() {
		l.ModelKVHeads = g.KVHeads
	}
	l.Groups = g.layoutGroups()
	return l
}

// finish validates a built layout, clearing it on error so that callers never
// hold half a layout.
func (g Geometry) finish(l *Layout) error {
	if err := l.Validate(); err != nil {
		*l = Layout{}
		return err
	}
	return nil
}

// Check returns nil when l is a layout of this geometry, for any rank: the
// one [Geometry.Layout] or [Geometry.LayoutAt] would build with l's Mem,
// TPRank and regions. Otherwise the error, matching [ErrInvalid], is the
// geometry's own Validate error, or names the first Layout field that
// disagrees and both values, as in "Layout.BlockSize is 16, the geometry's
// is 32"; fields are compared in the order MLA, KVPacked, Order, DType,
// NumLayers, NumBlocks, BlockSize, HeadBytes, TPSize, KVHeads, ModelKVHeads
// (the earlier ones explain the later), and last comes l.Validate (TPRank,
// Mem, the regions). Orders compare by [OrderOf]: "" and OrderHND agree.
//
// ModelKVHeads may be 0 or the model's head count when heads are not
// replicated (the two mean the same, see [Layout]); with MLA it is ignored.
func (g Geometry) Check(l Layout) error {
	if err := g.Validate(); err != nil {
		return err
	}
	if g.PPSize > 1 || l.PPSize > 1 {
		return g.checkStage(l)
	}
	switch {
	case l.MLA != g.MLA:
		return invalidf("Layout.MLA is %v, the geometry's is %v", l.MLA, g.MLA)
	case l.KVPacked != g.KVPacked:
		return invalidf("Layout.KVPacked is %v, the geometry's is %v", l.KVPacked, g.KVPacked)
	case OrderOf(l.Order) != OrderOf(g.Order):
		return invalidf("Layout.Order is %q, the geometry's is %q", OrderOf(l.Order), OrderOf(g.Order))
	case l.DType != g.DType:
		return invalidf("Layout.DType is %q, the geometry's is %q", l.DType, g.DType)
	case l.NumLayers != g.Layers:
		return invalidf("Layout.NumLayers is %d, the geometry's is %d", l.NumLayers, g.Layers)
	case l.NumBlocks != g.Blocks:
		return invalidf("Layout.NumBlocks is %d, the geometry's is %d", l.NumBlocks, g.Blocks)
	case l.BlockSize != g.BlockSize:
		return invalidf("Layout.BlockSize is %d, the geometry's is %d", l.BlockSize, g.BlockSize)
	case l.HeadBytes != g.HeadBytes():
		return invalidf("Layout.HeadBytes is %d, the geometry's is %d (HeadDim %d x %d bytes)",
			l.HeadBytes, g.HeadBytes(), g.HeadDim, g.elemBytes())
	case l.TPSize != g.TPSize:
		return invalidf("Layout.TPSize is %d, the geometry's is %d", l.TPSize, g.TPSize)
	case l.KVHeads != g.RankHeads():
		return invalidf("Layout.KVHeads is %d, the geometry's is %d per rank", l.KVHeads, g.RankHeads())
	case !g.MLA && l.ModelKVHeads != g.KVHeads && (g.replicated() || l.ModelKVHeads != 0):
		return invalidf("Layout.ModelKVHeads is %d, the geometry's is %d", l.ModelKVHeads, g.KVHeads)
	}
	if err := g.checkGroups(l); err != nil {
		return err
	}
	return l.Validate()
}

// GeometryOf returns the geometry a valid layout implies: its layers, blocks,
// block size, TP size, dtype, MLA, KVPacked and Order, KVHeads = l.TotalKVHeads(), and the head
// size as HeadDim = HeadBytes / DTypeBytes(DType) with ElemBytes 0 when DType
// is known and divides HeadBytes, else HeadDim = HeadBytes with ElemBytes 1.
// For a valid l whose geometry validates, GeometryOf(l).Check(l) is nil. It
// never fails: for an invalid layout it copies the fields as they are, and
// Validate on the result says what is wrong.
func GeometryOf(l Layout) Geometry {
	g := Geometry{Layers: l.NumLayers, KVHeads: l.TotalKVHeads(), HeadDim: l.HeadBytes, DType: l.DType,
		ElemBytes: 1, BlockSize: l.BlockSize, Blocks: l.NumBlocks, TPSize: l.TPSize, MLA: l.MLA, KVPacked: l.KVPacked,
		Order: l.Order}
	per := 1 // elements of a region's head and token per HeadDim
	if l.KVPacked {
		per = 2
	}
	if e, err := DTypeBytes(l.DType); err == nil && l.HeadBytes%(e*per) == 0 {
		g.HeadDim, g.ElemBytes = l.HeadBytes/(e*per), 0
	} else if l.HeadBytes%per == 0 {
		g.HeadDim = l.HeadBytes / per
	}
	if gs := groupGeometryOf(&l); gs != nil {
		g.Groups = &gs
	}
	return g
}
