package descriptors

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rankLayout is a Qwen3-like rank: 8 KV heads split over tp ranks, or
// replicated with model = 8 when tp > 8.
func rankLayout(mla bool, kvHeads, model, rank, tp int) *Layout {
	l := &Layout{NumLayers: 2, NumBlocks: 4, BlockSize: 16, KVHeads: kvHeads, ModelKVHeads: model,
		HeadBytes: 256, DType: "bfloat16", MLA: mla, TPRank: rank, TPSize: tp}
	l.Regions = make([]Region, l.NumRegions())
	for i := range l.Regions {
		l.Regions[i].Base = uint64(i+1) << 32
	}
	return l
}

func TestSourcesAndTargets(t *testing.T) {
	tests := []struct {
		name     string
		src, dst func(rank int) *Layout
		srcTP    int
		dstTP    int
		sources  [][]int // per destination rank
		targets  [][]int // per source rank
	}{
		{
			name:  "equal TP",
			src:   func(r int) *Layout { return rankLayout(false, 4, 0, r, 2) },
			dst:   func(r int) *Layout { return rankLayout(false, 4, 0, r, 2) },
			srcTP: 2, dstTP: 2,
			sources: [][]int{{0}, {1}},
			targets: [][]int{{0}, {1}},
		},
		{
			name:  "destination TP larger",
			src:   func(r int) *Layout { return rankLayout(false, 4, 0, r, 2) },
			dst:   func(r int) *Layout { return rankLayout(false, 1, 0, r, 8) },
			srcTP: 2, dstTP: 8,
			sources: [][]int{{0}, {0}, {0}, {0}, {1}, {1}, {1}, {1}},
			targets: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}},
		},
		{
			name:  "source TP larger",
			src:   func(r int) *Layout { return rankLayout(false, 2, 0, r, 4) },
			dst:   func(r int) *Layout { return rankLayout(false, 4, 0, r, 2) },
			srcTP: 4, dstTP: 2,
			sources: [][]int{{0, 1}, {2, 3}},
			targets: [][]int{{0}, {0}, {1}, {1}},
		},
		{
			// 8 heads on 16 source ranks: head h on ranks 2h and 2h+1;
			// destination rank r picks replica r%2.
			name:  "source replicates heads",
			src:   func(r int) *Layout { return rankLayout(false, 1, 8, r, 16) },
			dst:   func(r int) *Layout { return rankLayout(false, 2, 0, r, 4) },
			srcTP: 16, dstTP: 4,
			sources: [][]int{{0, 2}, {5, 7}, {8, 10}, {13, 15}},
			targets: [][]int{{0}, nil, {0}, nil, nil, {1}, nil, {1}, {2}, nil, {2}, nil, nil, {3}, nil, {3}},
		},
		{
			name:  "destination replicates heads",
			src:   func(r int) *Layout { return rankLayout(false, 4, 0, r, 2) },
			dst:   func(r int) *Layout { return rankLayout(false, 1, 8, r, 16) },
			srcTP: 2, dstTP: 16,
			sources: [][]int{{0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}, {1}, {1}, {1}, {1}, {1}, {1}, {1}, {1}},
			targets: [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}},
		},
		{
			name:  "MLA, destination TP larger",
			src:   func(r int) *Layout { return rankLayout(true, 1, 0, r, 2) },
			dst:   func(r int) *Layout { return rankLayout(true, 1, 0, r, 4) },
			srcTP: 2, dstTP: 4,
			sources: [][]int{{0}, {1}, {0}, {1}},
			targets: [][]int{{0, 2}, {1, 3}},
		},
		{
			name:  "MLA, source TP larger: some writers feed nobody",
			src:   func(r int) *Layout { return rankLayout(true, 1, 0, r, 4) },
			dst:   func(r int) *Layout { return rankLayout(true, 1, 0, r, 2) },
			srcTP: 4, dstTP: 2,
			sources: [][]int{{0}, {1}},
			targets: [][]int{{0}, {1}, nil, nil},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for r := 0; r < tc.dstTP; r++ {
				got, err := Sources(tc.src(0), tc.dst(r))
				require.NoError(t, err)
				assert.Equal(t, tc.sources[r], got, "Sources for destination rank %d", r)
			}
			for s := 0; s < tc.srcTP; s++ {
				got, err := Targets(tc.src(s), tc.dst(0))
				require.NoError(t, err)
				assert.Equal(t, tc.targets[s], got, "Targets of source rank %d", s)
			}
		})
	}
}

func TestCompatibleErrors(t *testing.T) {
	base := func() *Layout { return rankLayout(false, 8, 0, 0, 1) }
	tests := []struct {
		name   string
		mutSrc func(*Layout)
		mutDst func(*Layout)
		kind   error
		msg    string
	}{
		{"layers", func(l *Layout) { l.NumLayers = 64; l.Regions = make([]Region, 128) }, func(l *Layout) {
			l.NumLayers = 32
			l.Regions = make([]Region, 64)
		}, ErrIncompatible, "descriptors: NumLayers differ: source 64, destination 32"},
		{"dtype", nil, func(l *Layout) { l.DType = "float8_e4m3fn" }, ErrIncompatible,
			"descriptors: DType differ: source bfloat16, destination float8_e4m3fn"},
		{"head bytes", nil, func(l *Layout) { l.HeadBytes = 128 }, ErrIncompatible,
			"descriptors: HeadBytes differ: source 256, destination 128"},
		{"MLA", nil, func(l *Layout) { l.MLA = true; l.Regions = l.Regions[:2] }, ErrIncompatible,
			"descriptors: MLA differ: source false, destination true"},
		{"MLA latent heads", func(l *Layout) { l.MLA = true; l.KVHeads = 1; l.Regions = l.Regions[:2] },
			func(l *Layout) { l.MLA = true; l.KVHeads = 2; l.Regions = l.Regions[:2] }, ErrIncompatible,
			"descriptors: KVHeads (MLA latent heads) differ: source 1, destination 2"},
		{"block ratio", nil, func(l *Layout) { l.BlockSize = 24 }, ErrIncompatible,
			"descriptors: BlockSize ratio is not an integer: source 16, destination 24"},
		{"model heads", nil, func(l *Layout) { l.KVHeads = 3; l.TPSize = 2 }, ErrIncompatible,
			"descriptors: model KV heads differ: source 8 (KVHeads 8 x TPSize 1, ModelKVHeads 0), destination 6 (KVHeads 3 x TPSize 2, ModelKVHeads 0)"},
		{"heads do not divide", nil, func(l *Layout) { l.KVHeads = 3; l.TPSize = 3; l.ModelKVHeads = 8 }, ErrInvalid,
			"descriptors: destination layout: ModelKVHeads 8 != KVHeads 3 x TPSize 3"},
		{"replication not a multiple", func(l *Layout) { l.KVHeads = 1; l.TPSize = 12; l.ModelKVHeads = 8 }, nil, ErrInvalid,
			"descriptors: source layout: TPSize 12 is not a multiple of ModelKVHeads 8"},
		{"replicated rank holding 2 heads", func(l *Layout) { l.KVHeads = 2; l.TPSize = 16; l.ModelKVHeads = 8 }, nil, ErrInvalid,
			"descriptors: source layout: KVHeads 2 with ModelKVHeads 8 < TPSize 16: each rank must hold 1 replicated head"},
		{"TP rank", func(l *Layout) { l.TPRank = 1 }, nil, ErrInvalid,
			"descriptors: source layout: TPRank 1 out of range [0, 1)"},
		{"regions", nil, func(l *Layout) { l.Regions = l.Regions[:3] }, ErrInvalid,
			"descriptors: destination layout: len(Regions) 3, want 4: 2 per layer (K and V) for 2 layers"},
		{"dtype empty", func(l *Layout) { l.DType = "" }, nil, ErrInvalid, "descriptors: source layout: DType is empty"},
		{"overflow", nil, func(l *Layout) { l.Regions[2].Base = ^uint64(0) - 100 }, ErrInvalid,
			"descriptors: destination layout: Regions[2] base 0xffffffffffffff9b + length 131072 overflows 64 bits"},
		{"mem", func(l *Layout) { l.Mem = 9 }, nil, ErrInvalid, "descriptors: source layout: Mem MemType(9) is not a NIXL memory type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := base(), base()
			if tc.mutSrc != nil {
				tc.mutSrc(src)
			}
			if tc.mutDst != nil {
				tc.mutDst(dst)
			}
			for _, err := range []error{
				Compatible(src, dst),
				func() error { _, err := Sources(src, dst); return err }(),
				func() error { _, err := Targets(src, dst); return err }(),
				func() error { _, err := Map(src, dst, []int{0}, []int{0}); return err }(),
				func() error {
					_, _, err := MapCoalesced(src, dst, Request{SrcBlocks: []int{0}, DstBlocks: []int{0}})
					return err
				}(),
			} {
				require.Error(t, err)
				assert.True(t, errors.Is(err, tc.kind), "%v is not %v", err, tc.kind)
				assert.Equal(t, tc.msg, err.Error())
			}
		})
	}
	require.NoError(t, Compatible(base(), base()))
}

func TestNilLayout(t *testing.T) {
	_, err := Map(nil, rankLayout(false, 8, 0, 0, 1), []int{0}, []int{0})
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "descriptors: source layout: layout is nil", err.Error())
	_, err = Targets(rankLayout(false, 8, 0, 0, 1), nil)
	assert.Equal(t, "descriptors: destination layout: layout is nil", err.Error())
}
