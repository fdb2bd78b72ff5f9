package descriptors

import (
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/nixl"
)

// stageMem is one side's memory for the stage tests: each rank on its own
// device id, addresses from 0.
type stageMem map[uint64][]byte

func (m stageMem) at(d nixl.Desc) []byte { return m[d.DevID][d.Addr : d.Addr+d.Len] }

// kvByte is the byte every test writes for (model layer, K/V, model head,
// token of the request, byte of the head): a decode byte can then be checked
// against the model position it must hold, whoever wrote it.
func kvByte(layer, kv, head, token, j int) byte {
	return byte(layer*131 + kv*71 + head*37 + token*13 + j*7 + 1)
}

// fillStage writes kvByte into the request's blocks of one prefill rank.
func fillStage(m stageMem, l *Layout, blocks []int) {
	per := l.NumRegions() / l.NumLayers
	for r := range l.Regions {
		layer, kv := l.FirstLayer+r/per, r%per
		for bi, b := range blocks {
			for h := range l.KVHeads {
				for t := range l.BlockSize {
					off := l.BlockDesc(r, b).Addr + uint64(h*l.BlockSize*l.HeadBytes+t*l.HeadBytes)
					for j := range l.HeadBytes {
						m[l.Regions[r].DevID][off+uint64(j)] = kvByte(layer, kv, l.FirstHead()+h, bi*l.BlockSize+t, j)
					}
				}
			}
		}
	}
}

// checkDecode compares every byte of the request's tokens on a decode rank
// with what the model position must hold.
func checkDecode(m stageMem, l *Layout, blocks []int, tokens int) error {
	per := l.NumRegions() / l.NumLayers
	for r := range l.Regions {
		layer, kv := r/per, r%per
		for bi, b := range blocks {
			for h := range l.KVHeads {
				for t := range l.BlockSize {
					if bi*l.BlockSize+t >= tokens {
						continue
					}
					off := l.BlockDesc(r, b).Addr + uint64(h*l.BlockSize*l.HeadBytes+t*l.HeadBytes)
					for j := range l.HeadBytes {
						want := kvByte(layer, kv, l.FirstHead()+h, bi*l.BlockSize+t, j)
						if got := m[l.Regions[r].DevID][off+uint64(j)]; got != want {
							return fmt.Errorf("decode rank %d layer %d kv %d head %d token %d byte %d: %d, want %d",
								l.TPRank, layer, kv, l.FirstHead()+h, bi*l.BlockSize+t, j, got, want)
						}
					}
				}
			}
		}
	}
	return nil
}

// stageCase is a prefill of PP x TP stages pushing into a decode engine
// without pipeline parallelism.
type stageCase struct {
	name           string
	prefill        Geometry // PPSize set
	decodeTP       int
	decodeBlockLen int // decode's block size (0: the prefill's)
}

func TestStagesPushIntoWholeDecode(t *testing.T) {
	base := Geometry{Layers: 5, KVHeads: 4, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 8}
	mla := Geometry{Layers: 4, KVHeads: 1, HeadDim: 8, DType: "bfloat16", BlockSize: 4, Blocks: 8, MLA: true}
	packed := base
	packed.KVPacked = true
	with := func(g Geometry, pp, tp int) Geometry { g.PPSize, g.TPSize = pp, tp; return g }
	for _, c := range []stageCase{
		{"PP 2 x TP 2 -> TP 2", with(base, 2, 2), 2, 0},
		{"PP 2 x TP 1 -> TP 2", with(base, 2, 1), 2, 0},
		{"PP 2 x TP 2 -> TP 1", with(base, 2, 2), 1, 0},
		{"PP 3 x TP 2 -> TP 4, uneven stages", with(base, 3, 2), 4, 0},
		{"PP 2 x TP 2 -> TP 2, decode blocks twice as large", with(base, 2, 2), 2, 8},
		{"PP 2 x TP 2 -> TP 1, MLA", with(mla, 2, 2), 1, 0},
		{"PP 2 x TP 1 -> TP 2, MLA", with(mla, 2, 1), 2, 0},
		{"PP 2 x TP 2 -> TP 2, K and V packed", with(packed, 2, 2), 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) { runStageCase(t, c) })
	}
}

func runStageCase(t *testing.T, c stageCase) {
	g := c.prefill
	dg := g
	dg.PPSize, dg.TPSize = 0, c.decodeTP
	if c.decodeBlockLen > 0 {
		dg.BlockSize = c.decodeBlockLen
	}
	src, dst := stageMem{}, stageMem{}
	var stages [][]*Layout
	for s := range g.PPSize {
		var ranks []*Layout
		for r := range g.TPSize {
			dev := uint64(100 + s*g.TPSize + r)
			src[dev] = make([]byte, g.StageBytes(s))
			l, err := g.StageLayout(nixl.VRAM, s, r, nixl.Desc{Len: g.StageBytes(s), DevID: dev})
			require.NoError(t, err)
			require.NoError(t, g.Check(l))
			assert.Equal(t, s*g.TPSize+r, l.WorldRank())
			ranks = append(ranks, &l)
		}
		stages = append(stages, ranks)
	}
	firsts := make([]*Layout, len(stages))
	for s := range stages {
		firsts[s] = stages[s][0]
	}
	require.NoError(t, CheckStages(firsts))
	var decode []*Layout
	for r := range dg.TPSize {
		dev := uint64(200 + r)
		dst[dev] = make([]byte, dg.RankBytes())
		l, err := dg.Layout(nixl.VRAM, r, nixl.Desc{Len: dg.RankBytes(), DevID: dev})
		require.NoError(t, err)
		decode = append(decode, &l)
	}

	// 13 tokens: prefill blocks 5, 2, 7, 0 (4 tokens each); decode's own ids.
	const tokens = 13
	srcBlocks := []int{5, 2, 7, 0}
	dstBlocks := []int{6, 1, 3, 4}
	if c.decodeBlockLen > 0 {
		dstBlocks = []int{6, 1}
	}
	for _, ranks := range stages {
		for _, l := range ranks {
			fillStage(src, l, srcBlocks)
		}
	}
	written := map[int]int{} // completions each decode rank would count
	for _, ranks := range stages {
		for _, sl := range ranks {
			targets, err := Targets(sl, decode[0])
			require.NoError(t, err)
			for _, d := range targets {
				tr, st, err := MapCoalesced(sl, decode[d], Request{SrcBlocks: srcBlocks, DstBlocks: dstBlocks})
				require.NoError(t, err)
				require.Equal(t, tr.Len(), st.After)
				for i := range tr.Src.Descs {
					copy(dst.at(tr.Dst.Descs[i]), src.at(tr.Src.Descs[i]))
				}
				written[d]++
			}
		}
	}
	for d, l := range decode {
		require.NoError(t, checkDecode(dst, l, dstBlocks, tokens))
		want := 0
		for _, ranks := range stages {
			srcs, err := Sources(ranks[0], l)
			require.NoError(t, err)
			want += len(srcs)
		}
		assert.Equal(t, want, written[d], "decode rank %d: writing ranks", d)
	}
}

func TestStageMapMovesOnlyItsLayers(t *testing.T) {
	g := Geometry{Layers: 4, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 2, TPSize: 1, PPSize: 2}
	s1, err := g.StageLayout(nixl.DRAM, 1, 0, nixl.Desc{Addr: 0x10000, Len: g.StageBytes(1)})
	require.NoError(t, err)
	assert.Equal(t, 2, s1.FirstLayer)
	assert.Equal(t, 2, s1.NumLayers)
	assert.Len(t, s1.Regions, 4)
	whole := g
	whole.PPSize = 0
	d, err := whole.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x80000, Len: whole.RankBytes()})
	require.NoError(t, err)
	tr, err := MapRequest(&s1, &d, Request{SrcBlocks: []int{1}, DstBlocks: []int{0}})
	require.NoError(t, err)
	// Stage 1's K and V of layers 2 and 3 land in decode's regions 4..7.
	require.Equal(t, 4, tr.Len())
	for i, desc := range tr.Dst.Descs {
		assert.Equal(t, d.BlockDesc(4+i, 0), desc, "pair %d", i)
		assert.Equal(t, s1.BlockDesc(i, 1), tr.Src.Descs[i], "pair %d", i)
	}
}

func TestStageValidateErrors(t *testing.T) {
	g := Geometry{Layers: 4, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 2, TPSize: 1, PPSize: 2}
	ok, err := g.StageLayout(nixl.DRAM, 1, 0, nixl.Desc{Addr: 0x10000, Len: g.StageBytes(1)})
	require.NoError(t, err)
	for _, c := range []struct {
		mut  func(l *Layout)
		want string
	}{
		{func(l *Layout) { l.PPSize = -1 }, "PPSize -1 must not be negative (0 means 1)"},
		{func(l *Layout) { l.PPRank = 2 }, "PPRank 2 out of range [0, 2)"},
		{func(l *Layout) { l.FirstLayer = -1 }, "FirstLayer -1 must not be negative"},
		{func(l *Layout) { l.ModelLayers = -2 }, "ModelLayers -2 must not be negative (0 means NumLayers)"},
		{func(l *Layout) { l.FirstLayer = 3 }, "FirstLayer 3 + NumLayers 2 exceeds ModelLayers 4"},
		{func(l *Layout) { l.PPSize, l.PPRank = 0, 0 }, "FirstLayer 2, NumLayers 2 of ModelLayers 4 with PPSize 0: a layout without pipeline parallelism holds every layer"},
		{func(l *Layout) { l.PPSize = 5 }, "PPSize 5 exceeds ModelLayers 4: every stage holds at least one layer"},
		{func(l *Layout) { l.ModelLayers = MaxLayers + 1 }, fmt.Sprintf("ModelLayers %d is above the limit of %d", MaxLayers+1, MaxLayers)},
	} {
		l := ok
		c.mut(&l)
		err := l.Validate()
		require.ErrorIs(t, err, ErrInvalid, c.want)
		assert.Equal(t, "descriptors: "+c.want, err.Error())
	}

	for _, c := range []struct {
		g    Geometry
		want string
	}{
		{Geometry{Layers: 2, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 2, TPSize: 1, PPSize: 3}, "Geometry.PPSize is 3, want <= Layers 2: every stage holds at least one layer"},
		{Geometry{Layers: 2, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 2, TPSize: 1, PPSize: -1}, "Geometry.PPSize is -1, want >= 0 (0 or 1: no pipeline parallelism)"},
	} {
		err := c.g.Validate()
		require.ErrorIs(t, err, ErrInvalid)
		assert.Equal(t, "descriptors: "+c.want, err.Error())
	}
	_, err = g.Layout(nixl.DRAM, 0, nixl.Desc{Len: 1 << 20})
	assert.EqualError(t, err, "descriptors: Geometry.PPSize is 2: a rank holds one stage's layers, build its layout with StageLayout")
	_, _, err = g.StageLayers(2)
	assert.EqualError(t, err, "descriptors: ppRank is 2, want in [0, 2) (PPSize)")

	other := ok
	other.ModelLayers = 6
	assert.EqualError(t, g.Check(other), "descriptors: Layout.ModelLayers is 6, the geometry's Layers is 4")
	whole := g
	whole.PPSize = 0
	d, err := whole.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x80000, Len: whole.RankBytes()})
	require.NoError(t, err)
	assert.EqualError(t, whole.Check(ok), "descriptors: Layout.PPSize is 2, the geometry's is 0")
	err = Compatible(&other, &d)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.EqualError(t, err, "descriptors: ModelLayers (the model's layers) differ: source 6, destination 4")
}

func TestStageLayersSplit(t *testing.T) {
	g := Geometry{Layers: 10, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 2, TPSize: 1, PPSize: 4}
	var got [][2]int
	for s := range 4 {
		first, n, err := g.StageLayers(s)
		require.NoError(t, err)
		got = append(got, [2]int{first, n})
	}
	assert.Equal(t, [][2]int{{0, 3}, {3, 3}, {6, 2}, {8, 2}}, got)
}

func TestCheckStagesErrors(t *testing.T) {
	g := Geometry{Layers: 6, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 2, TPSize: 1, PPSize: 3}
	stage := func(s int) *Layout {
		l, err := g.StageLayout(nixl.DRAM, s, 0, nixl.Desc{Addr: uint64(s) << 20, Len: g.StageBytes(s)})
		require.NoError(t, err)
		return &l
	}
	a, b, c := stage(0), stage(1), stage(2)
	require.NoError(t, CheckStages([]*Layout{a, b, c}))
	gap := *c
	gap.FirstLayer, gap.NumLayers, gap.Regions = 5, 1, gap.Regions[:2]
	for _, tc := range []struct {
		stages []*Layout
		want   string
	}{
		{nil, "no pipeline stages"},
		{[]*Layout{a, b}, "stage 0: PPSize 3, want 2 (the number of stages)"},
		{[]*Layout{b, a, c}, "stage 0: PPRank is 1"},
		{[]*Layout{a, c, c}, "stage 1: PPRank is 2"},
		{[]*Layout{a, b, &gap}, "stage 2: FirstLayer 5, want 4 (where stage 1 ends)"},
	} {
		err := CheckStages(tc.stages)
		require.ErrorIs(t, err, ErrInvalid)
		assert.Equal(t, "descriptors: "+tc.want, err.Error())
	}
	short := *c
	short.NumLayers, short.Regions = 1, short.Regions[:2]
	assert.EqualError(t, CheckStages([]*Layout{a, b, &short}), "descriptors: stage 2 ends at layer 5, ModelLayers is 6: the stages do not cover the model")
}

// TestStageWire pins a stage layout's bytes and round-trips it; a layout
// without pipeline parallelism keeps its old bytes (TestLayoutWireVectors).
func TestStageWire(t *testing.T) {
	l := Layout{Mem: nixl.DRAM, Regions: []Region{{Base: 4096}, {Base: 8192}}, NumLayers: 1, NumBlocks: 4, BlockSize: 4,
		KVHeads: 1, HeadBytes: 8, DType: "bfloat16", TPSize: 1, PPRank: 1, PPSize: 2, FirstLayer: 1, ModelLayers: 2}
	require.NoError(t, l.Validate())
	b, err := msgpack.Marshal(&l)
	require.NoError(t, err)
	h := hex.EncodeToString(b)
	// The four stage keys come last, after tp_size.
	assert.Contains(t, h, hex.EncodeToString([]byte("tp_size"))+"01"+
		"a7"+hex.EncodeToString([]byte("pp_rank"))+"01"+
		"a7"+hex.EncodeToString([]byte("pp_size"))+"02"+
		"ab"+hex.EncodeToString([]byte("first_layer"))+"01"+
		"ac"+hex.EncodeToString([]byte("model_layers"))+"02")
	var got Layout
	require.NoError(t, msgpack.Unmarshal(b, &got))
	assert.Equal(t, l, got)
	for _, v := range wireVectors {
		b, err := msgpack.Marshal(&v.layout)
		require.NoError(t, err)
		assert.NotContains(t, hex.EncodeToString(b), hex.EncodeToString([]byte("pp_size")))
	}
}
