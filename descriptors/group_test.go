package descriptors

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/nixl"
)

func TestGroupValidateErrors(t *testing.T) {
	require.NoError(t, hybridLayout().Validate())
	tests := []struct {
		name   string
		mutate func(l *Layout)
		msg    string
	}{
		{"unknown kind", func(l *Layout) { l.Groups[0].Kind = "attn" },
			`descriptors: Groups[0].Kind "attn" is not one of "full", "sliding_window", "mla", "ssm"`},
		{"window missing", func(l *Layout) { l.Groups[1].Window = 0 },
			"descriptors: Groups[1].Window is 0, want in [1, 1073741824] for a sliding_window group"},
		{"window on full", func(l *Layout) { l.Groups[0].Window = 3 },
			"descriptors: Groups[0].Window is 3, want 0 for a full group"},
		{"region out of range", func(l *Layout) { l.Groups[0].Regions[0] = 3 },
			"descriptors: Groups[0].Regions[0] is 3, out of range [0, 3)"},
		{"region twice", func(l *Layout) { l.Groups[2].Regions = []int{0, 0} },
			"descriptors: Groups[2].Regions[1] is 0, already at Groups[2].Regions[0]"},
		{"region of no group", func(l *Layout) { l.Groups[1].Regions = []int{0} },
			"descriptors: Regions[1] belongs to no group"},
		{"shared region, other block length", func(l *Layout) { l.Groups[2].SSM.Page = 256 },
			"descriptors: Groups[2].Regions[0] is region 0, which Groups[0] gives blocks of 64 bytes and this group blocks of 128 bytes: groups sharing a region must agree on its block length"},
		{"ssm without state", func(l *Layout) { l.Groups[2].SSM = nil },
			"descriptors: Groups[2].SSM is nil, want the state geometry of an ssm group"},
		{"state on attention", func(l *Layout) { l.Groups[0].SSM = &SSMState{Conv: []int{1}, State: 1} },
			"descriptors: Groups[0].SSM is set on a full group"},
		{"page too small", func(l *Layout) { l.Groups[2].SSM.Page = 100 },
			"descriptors: Groups[2].SSM.Page is 100, below the 104 bytes of conv (24+8+8) and state (64)"},
		{"no conv", func(l *Layout) { l.Groups[2].SSM.Conv = nil },
			"descriptors: Groups[2].SSM.Conv has 0 parts, want 1 to 8 (x, B, C for Mamba2 and GDN; x for Mamba1)"},
		{"zero state", func(l *Layout) { l.Groups[2].SSM.State = 0 },
			"descriptors: Groups[2].SSM.State is 0, want in [1, 1073741824]"},
		{"ratio not dividing", func(l *Layout) { l.Groups[0].PhysicalPerLogical = 3 },
			"descriptors: Groups[0].PhysicalPerLogical is 3, which does not divide NumBlocks 8"},
		{"MLA flag with groups", func(l *Layout) { l.KVPacked = false; l.MLA = true },
			`descriptors: MLA is set with 3 Groups: give the MLA layers a group of Kind "mla" instead`},
		{"heads on full", func(l *Layout) { l.Groups[0].KVHeads = 2 },
			"descriptors: Groups[0].KVHeads 2 and HeadBytes 0, want 0 for a full group (it uses the layout's)"},
		{"block size on ssm", func(l *Layout) { l.Groups[2].BlockSize = 4 },
			"descriptors: Groups[2].BlockSize is 4, want 0 for an ssm group (its blocks hold state, not tokens)"},
		{"K and V need pairs", func(l *Layout) { l.KVPacked = false },
			"descriptors: Groups[0].Regions has 1 regions, want an even count: K and V per layer (KVPacked is false)"},
		{"too many groups", func(l *Layout) { l.Groups = make([]Group, MaxGroups+1) },
			"descriptors: len(Groups) 65 is above the limit of 64"},
		{"empty group", func(l *Layout) { l.Groups[1].Regions = nil },
			"descriptors: Groups[1].Regions is empty"},
		{"overlap", func(l *Layout) { l.Regions[2].Base = 0x1000 + 8*64 - 1 },
			"descriptors: Regions[0] (base 0x1000) and Regions[2] (base 0x11ff) overlap on device 0 (region lengths 512 and 512)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := hybridLayout()
			tc.mutate(l)
			err := l.Validate()
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tc.msg, err.Error())
		})
	}
}

// A grouped layout and its order round-trip through the handshake's
// encoding under their documented keys; defaults stay off the wire.
func TestGroupWireRoundTrip(t *testing.T) {
	l := hybridLayout()
	b, err := msgpack.Marshal(l)
	require.NoError(t, err)
	var got Layout
	require.NoError(t, msgpack.Unmarshal(b, &got))
	assert.Equal(t, *l, got)
	require.NoError(t, got.Validate())

	var m map[string]any
	require.NoError(t, msgpack.Unmarshal(b, &m))
	assert.Equal(t, "NHD", m["order"])
	groups := m["groups"].([]any)
	require.Len(t, groups, 3)
	assert.Equal(t, map[string]any{"kind": "full", "regions": []any{int8(0)}, "physical_per_logical": int8(2)}, groups[0])
	assert.Equal(t, map[string]any{"kind": "ssm", "regions": []any{int8(0), int8(2)}, "physical_per_logical": int8(2),
		"ssm": map[string]any{"conv": []any{int8(24), int8(8), int8(8)}, "state": int8(64), "page": uint8(128)}}, groups[2])
}

// TestGroupDecodeBounds: a peer's claimed counts are refused before
// anything is allocated for them.
func TestGroupDecodeBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		msg  string
	}{
		{"groups", []byte{0x81, 0xa6, 'g', 'r', 'o', 'u', 'p', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff},
			"descriptors: layout lists 2147483647 groups, limit 64"},
		{"regions", []byte{0x81, 0xa6, 'g', 'r', 'o', 'u', 'p', 's', 0x91, 0x81, 0xa7, 'r', 'e', 'g', 'i', 'o', 'n', 's', 0xdd, 0x00, 0x10, 0x00, 0x00},
			"descriptors: layout groups[0].regions: 1048576 elements, limit 32768"},
		{"nil group", []byte{0x81, 0xa6, 'g', 'r', 'o', 'u', 'p', 's', 0x91, 0xc0},
			"descriptors: layout groups[0] is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Layout
			err := msgpack.Unmarshal(tc.b, &l)
			require.Error(t, err)
			assert.Equal(t, tc.msg, err.Error())
		})
	}
}

// swaPair is a model of one full-attention layer and one sliding-window
// layer (window 4), 2-token blocks, 1 head of 4 bytes, TP 1: K and V
// regions of 8 blocks of 8 bytes. Source regions at 1000..4000 on device
// 0, destination ones at 5000..8000 on device 1 (decimal).
func swaPair() (src, dst *Layout) {
	mk := func(base uint64, dev uint64) *Layout {
		l := &Layout{Mem: nixl.VRAM, NumLayers: 2, NumBlocks: 8, BlockSize: 2, KVHeads: 1, HeadBytes: 4, DType: "bfloat16", TPSize: 1,
			Groups: []Group{{Kind: KindFull, Regions: []int{0, 1}}, {Kind: KindSlidingWindow, Regions: []int{2, 3}, Window: 4}}}
		for i := range 4 {
			l.Regions = append(l.Regions, Region{Base: base + uint64(i)*1000, DevID: dev})
		}
		return l
	}
	return mk(1000, 0), mk(5000, 1)
}

func TestMapGroupsSlidingWindow(t *testing.T) {
	src, dst := swaPair()
	// 7 tokens: 4 blocks. Full: the destination holds the first block
	// (prefix hit) and lists 3. SWA: the window is tokens 3..6; the source
	// lists blocks from token 2, the destination from token 4.
	req := GroupRequest{Tokens: 7, Src: [][]int{{0, 1, 2, 3}, {4, 5, 6}}, Dst: [][]int{{5, 6, 7}, {1, 2}}}
	plain, err := MapGroupsRequest(src, dst, req)
	require.NoError(t, err)
	assert.Equal(t, pairs{
		{1008, 5040, 8}, {1016, 5048, 8}, {1024, 5056, 8}, {2008, 6040, 8}, {2016, 6048, 8}, {2024, 6056, 8},
		{3040, 7008, 8}, {3048, 7016, 8}, {4040, 8008, 8}, {4048, 8016, 8},
	}, flatten(plain))
	merged, st, err := MapGroups(src, dst, req)
	require.NoError(t, err)
	want := pairs{{1008, 5040, 24}, {2008, 6040, 24}, {3040, 7008, 16}, {4040, 8008, 16}}
	assert.Equal(t, want, flatten(merged))
	assert.Equal(t, Stats{Before: 10, After: 4}, st)
	assert.Equal(t, uint64(80), merged.Bytes)
	c, st2 := Coalesce(plain)
	assert.Equal(t, merged, c)
	assert.Equal(t, st, st2)

	// A group's empty list moves nothing of it.
	req.Dst[1] = nil
	merged, _, err = MapGroups(src, dst, req)
	require.NoError(t, err)
	assert.Equal(t, want[:2], flatten(merged))
}

func TestMapGroupsRefusals(t *testing.T) {
	ok := func() GroupRequest {
		return GroupRequest{Tokens: 7, Src: [][]int{{0, 1, 2, 3}, {4, 5, 6}}, Dst: [][]int{{5, 6, 7}, {1, 2}}}
	}
	tests := []struct {
		name   string
		mutate func(src, dst *Layout, req *GroupRequest)
		msg    string
		kind   error
	}{
		{"window not held by the source", func(_, _ *Layout, r *GroupRequest) { r.Src[1] = []int{5, 6} },
			"descriptors: Groups[1] (sliding_window, Window 4): source blocks start at token 4, after the window of the request's 7 tokens, which starts at token 3", ErrInvalid},
		{"full source starts late", func(_, _ *Layout, r *GroupRequest) { r.Src[0] = []int{1, 2, 3}; r.Dst[0] = []int{4, 5, 6, 7} },
			"descriptors: Groups[0] (full): source blocks start at token 2, after the destination's at token 0: the source lacks tokens the destination needs", ErrInvalid},
		{"list longer than the request", func(_, _ *Layout, r *GroupRequest) { r.Src[0] = []int{0, 1, 2, 3, 4} },
			"descriptors: Groups[0] (full): source lists 5 blocks of 2 tokens, more than the 4 that hold the request's 7 tokens", ErrInvalid},
		{"one list per group", func(_, _ *Layout, r *GroupRequest) { r.Src = r.Src[:1] },
			"descriptors: GroupRequest.Src has 1 lists, the layouts have 2 KV-cache groups", ErrInvalid},
		{"id out of range", func(_, _ *Layout, r *GroupRequest) { r.Dst[1] = []int{8, 2} },
			"descriptors: Groups[1]: destination block id 8 at index 0 out of range [0, 8)", ErrInvalid},
		{"id twice", func(_, _ *Layout, r *GroupRequest) { r.Dst[0] = []int{5, 6, 5} },
			"descriptors: Groups[0]: destination block id 5 appears twice (again at index 2)", ErrInvalid},
		{"windows differ", func(_, d *Layout, _ *GroupRequest) { d.Groups[1].Window = 8 },
			"descriptors: Groups[1].Window differ: source 4, destination 8", ErrIncompatible},
		{"kinds differ", func(_, d *Layout, _ *GroupRequest) { d.Groups[1].Kind, d.Groups[1].Window = KindFull, 0 },
			"descriptors: Groups[1].Kind differ: source sliding_window, destination full", ErrIncompatible},
		{"group counts differ", func(_, d *Layout, _ *GroupRequest) { d.Groups = d.Groups[:1]; d.Groups[0].Regions = []int{0, 1, 2, 3} },
			"descriptors: KV-cache group counts differ: source 2, destination 1", ErrIncompatible},
		{"shared block named twice", func(_, d *Layout, r *GroupRequest) {
			d.Groups[1].Regions, d.Regions = []int{0, 1}, d.Regions[:2]
			r.Dst[1] = []int{6, 2}
		}, "descriptors: destination physical block 6 is named by Groups[0] (block 6 at index 1) and Groups[1] (block 6 at index 0), which share a region", ErrInvalid},
		{"tokens negative", func(_, _ *Layout, r *GroupRequest) { r.Tokens = -1 },
			"descriptors: GroupRequest.Tokens is -1, want in [0, 2147483648]", ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := swaPair()
			req := ok()
			tc.mutate(src, dst, &req)
			tr, err := MapGroupsRequest(src, dst, req)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.kind)
			assert.Equal(t, tc.msg, err.Error())
			assert.Equal(t, Transfer{}, tr)
			_, st, err := MapGroups(src, dst, req)
			assert.Equal(t, tc.msg, err.Error())
			assert.Equal(t, Stats{}, st)
			buf := Transfer{Bytes: 7}
			_, err = MapGroupsInto(&buf, src, dst, req)
			assert.Equal(t, tc.msg, err.Error())
			assert.Equal(t, Transfer{Bytes: 7}, buf, "buf changed on error")
		})
	}

	// The single-group entry points refuse grouped layouts.
	src, dst := swaPair()
	_, err := Map(src, dst, []int{0}, []int{0})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "descriptors: source layout has 2 KV-cache groups: map its requests with MapGroups", err.Error())
}

// hybridRank is rank r of TP tp of a model with one full-attention layer
// (2 KV heads, 2-token blocks, 4 bytes per head) and one Mamba2 layer whose
// conv state is x 8, B 4, C 4 bytes and temporal state 8 bytes over the
// whole model, each split over the TP ranks; regions K, V, state at base,
// base+0x1000, base+0x2000.
func hybridRank(r, tp int, base, dev uint64) *Layout {
	l := &Layout{Mem: nixl.DRAM, NumLayers: 2, NumBlocks: 8, BlockSize: 2, KVHeads: 2 / tp, HeadBytes: 4, DType: "bfloat16",
		TPRank: r, TPSize: tp,
		Regions: []Region{{Base: base, DevID: dev}, {Base: base + 0x1000, DevID: dev}, {Base: base + 0x2000, DevID: dev}},
		Groups: []Group{{Kind: KindFull, Regions: []int{0, 1}},
			{Kind: KindSSM, Regions: []int{2}, SSM: &SSMState{Conv: []int{8 / tp, 4 / tp, 4 / tp}, State: 8 / tp}}}}
	return l
}

// Mamba state across TP sizes: each prefill rank of TP 2 holds half of
// every part; the decode rank of TP 1 gathers both halves into its page,
// one descriptor per part and source rank (vLLM's three conv reads plus
// the state, from each source).
func TestMapGroupsSSMAcrossTP(t *testing.T) {
	p0, p1 := hybridRank(0, 2, 0x10000, 0), hybridRank(1, 2, 0x20000, 0)
	d := hybridRank(0, 1, 0x50000, 1)
	sources, err := Sources(p0, d)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1}, sources)
	targets, err := Targets(p1, d)
	require.NoError(t, err)
	assert.Equal(t, []int{0}, targets)

	// Slot 3 of the prefill (12-byte pages) into slot 1 of the decode
	// (24-byte pages); no attention tokens.
	req := GroupRequest{Tokens: 0, Src: [][]int{nil, {3}}, Dst: [][]int{nil, {1}}}
	S0, S1, D := uint64(0x12000+36), uint64(0x22000+36), uint64(0x52000+24)
	tr, st, err := MapGroups(p0, d, req)
	require.NoError(t, err)
	assert.Equal(t, pairs{{S0, D, 4}, {S0 + 4, D + 8, 2}, {S0 + 6, D + 12, 2}, {S0 + 8, D + 16, 4}}, flatten(tr))
	assert.Equal(t, Stats{Before: 4, After: 4}, st)
	tr, _, err = MapGroups(p1, d, req)
	require.NoError(t, err)
	assert.Equal(t, pairs{{S1, D + 4, 4}, {S1 + 4, D + 10, 2}, {S1 + 6, D + 14, 2}, {S1 + 8, D + 20, 4}}, flatten(tr))

	// At equal TP the whole page is one run, and adjacent slots merge.
	d2 := hybridRank(1, 2, 0x50000, 1)
	tr, st, err = MapGroups(p1, d2, GroupRequest{Src: [][]int{nil, {3, 4}}, Dst: [][]int{nil, {6, 7}}})
	require.NoError(t, err)
	assert.Equal(t, pairs{{S1, 0x52000 + 72, 24}}, flatten(tr))
	assert.Equal(t, Stats{Before: 8, After: 1}, st)

	// A destination slot needs a source one; the model's state must match.
	_, _, err = MapGroups(p0, d, GroupRequest{Src: [][]int{nil, {3}}, Dst: [][]int{nil, {1, 2}}})
	assert.EqualError(t, err, "descriptors: Groups[1] (ssm): destination lists 2 state slots, the source 1: every destination slot needs the source's")
	d.Groups[1].SSM.State = 16
	_, _, err = MapGroups(p0, d, req)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.EqualError(t, err, "descriptors: Groups[1].SSM.State model bytes differ: source 8 (4 x TPSize 2), destination 16 (16 x TPSize 1)")
}

// A layout without groups is one group: MapGroups of its request (the
// lists from token 0, the destination's after its prefix hit) gives
// exactly what MapCoalesced gives, and MapGroupsRequest what MapRequest
// gives, over the random single-group scenarios.
func TestMapGroupsWithoutGroupsIsMapCoalesced(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 24))
	for i := 0; i < 500; i++ {
		sc := randomScenario(rng)
		req := GroupRequest{Tokens: sc.tokens, Src: [][]int{sc.req.SrcBlocks}, Dst: [][]int{sc.req.DstBlocks}}
		for r, dl := range sc.dst {
			sources, err := Sources(sc.src[0], dl)
			require.NoError(t, err)
			for _, s := range sources {
				want, wst, err := MapCoalesced(sc.src[s], dl, sc.req)
				require.NoError(t, err)
				got, gst, err := MapGroups(sc.src[s], dl, req)
				require.NoError(t, err, "case %d src %d dst %d\n%v", i, s, r, sc)
				require.Equal(t, want, got, "case %d src %d dst %d\n%v", i, s, r, sc)
				require.Equal(t, wst, gst)
				plain, err := MapRequest(sc.src[s], dl, sc.req)
				require.NoError(t, err)
				gplain, err := MapGroupsRequest(sc.src[s], dl, req)
				require.NoError(t, err)
				require.Equal(t, flatten(plain), flatten(gplain))
			}
		}
	}
}

func TestMapGroupsBlockSizeRatio(t *testing.T) {
	src, dst := swaPair()
	dst.Groups[0].BlockSize = 3
	_, _, err := MapGroups(src, dst, GroupRequest{Tokens: 7, Src: [][]int{{0, 1, 2, 3}, {4, 5, 6}}, Dst: [][]int{{5, 6, 7}, {1, 2}}})
	require.ErrorIs(t, err, ErrIncompatible)
	assert.Equal(t, "descriptors: Groups[0] (full): BlockSize ratio is not an integer: source 2, destination 3", err.Error())
}
