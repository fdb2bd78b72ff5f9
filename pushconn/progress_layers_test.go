package pushconn

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Per-layer progressive push (writelayers.go): the engine reports a
// chunk's blocks final in its first layers, layer by layer, through the
// engine-facing Progress(connector.Request{FinalLayers: n}). Prefill's
// bytes of a layer are computed only when it is reported, and spoiled once
// its WRITE landed, so decode's copy is right only if each layer moved
// after it was final and never again; the write recorder proves every
// (block, region) of decode's blocks was written exactly once.

// layersN is the layer count of the per-layer rigs: enough for reports
// of one, two and three layers before the last.
const layersN = 4

// reportLayers is the engine-facing per-layer Progress of "req".
func reportLayers(p *Producer, blocks []int, tokens, layers int) error {
	return producer{p}.Progress(connector.Request{ID: "req", Blocks: [][]int{blocks}, Tokens: tokens, FinalLayers: layers})
}

// visitLayers is visit for the regions of layers [lo, hi) only; blocks
// start at token first.
func visitLayers(t testing.TB, l descriptors.Layout, blocks []int, first, tokens, lo, hi int, f func(p *byte, region, head, token, b int)) {
	per := l.NumRegions() / l.NumLayers
	visit(t, l, blocks, first, tokens, func(p *byte, region, head, token, b int) {
		if region/per >= lo && region/per < hi {
			f(p, region, head, token, b)
		}
	})
}

// fillLayers computes request seed's bytes of blocks (from token first)
// in layers [lo, hi).
func fillLayers(t testing.TB, l descriptors.Layout, blocks []int, first, tokens, lo, hi, seed int) {
	visitLayers(t, l, blocks, first, tokens, lo, hi, func(p *byte, region, head, token, b int) { *p = kvByte(seed, region, head, token, b) })
}

// holdsLayers reports whether decode's blocks (from token first) hold
// request seed's bytes in layers [lo, hi).
func holdsLayers(t testing.TB, l descriptors.Layout, blocks []int, first, tokens, lo, hi, seed int) bool {
	ok := true
	visitLayers(t, l, blocks, first, tokens, lo, hi, func(p *byte, region, head, token, b int) {
		if *p != kvByte(seed, region, head, token, b) {
			ok = false
		}
	})
	return ok
}

// writtenOnce requires that the recorded WRITEs (those of index from on)
// wrote every byte of decode's dst blocks, in every region, exactly once
// and no other byte of decode's KV caches.
func writtenOnce(t testing.TB, r *rig, rec *writeRecorder, from int, dst []int) {
	t.Helper()
	counts := coverage(t, r, rec, from)
	for i, l := range r.decLayout {
		mine := map[int]bool{}
		for _, b := range dst {
			mine[b] = true
		}
		for region := range l.NumRegions() {
			for b := range l.NumBlocks {
				off := uint64(region)*l.RegionLen() + uint64(b)*l.BlockLen()
				want := uint8(0)
				if mine[b] {
					want = 1
				}
				for j := range l.BlockLen() {
					if got := counts[i][off+j]; got != want {
						require.Failf(t, "a (block, region) not written exactly once", "decode rank %d region %d block %d byte %d written %d times, want %d", i, region, b, j, got, want)
					}
				}
			}
		}
	}
}

// coverage counts, per decode rank, how many of the recorded WRITEs (of
// index from on) wrote each byte of its KV cache.
func coverage(t testing.TB, r *rig, rec *writeRecorder, from int) [][]uint8 {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	counts := make([][]uint8, len(r.decLayout))
	for i, l := range r.decLayout {
		counts[i] = make([]uint8, l.RegionLen()*uint64(l.NumRegions()))
	}
	for _, w := range rec.writes[from:] {
		var rank int
		_, err := fmt.Sscanf(w.to, "decode-%d", &rank)
		require.NoError(t, err, w.to)
		base := r.decLayout[rank].Regions[0].Base
		for _, d := range w.remote {
			require.GreaterOrEqual(t, d.Addr, base)
			require.LessOrEqual(t, d.Addr-base+d.Len, uint64(len(counts[rank])), "a WRITE outside decode rank %d's KV cache", rank)
			for j := d.Addr - base; j < d.Addr-base+d.Len; j++ {
				counts[rank][j]++
			}
		}
	}
	return counts
}

// layersOf returns the layers of decode rank 0's regions that write w
// (by index) wrote into.
func layersOf(r *rig, rec *writeRecorder, w int) []int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	l := r.decLayout[0]
	per := uint64(l.NumRegions() / l.NumLayers)
	seen := map[int]bool{}
	var out []int
	for _, d := range rec.writes[w].remote {
		layer := int((d.Addr - l.Regions[0].Base) / l.RegionLen() / per)
		if !seen[layer] {
			seen[layer] = true
			out = append(out, layer)
		}
	}
	return out
}

// TestProgressLayersMixed: chunk A reported in layer 1, then layers 3,
// then every layer; chunk B in layers 2, then the finish. Each layer is
// computed only when reported and spoiled once its WRITE landed: decode
// ends with every byte right, every (block, region) written once.
func TestProgressLayersMixed(t *testing.T) {
	for _, tp := range [][2]int{{1, 1}, {2, 1}, {1, 2}} {
		t.Run(fmt.Sprintf("tp%dto%d", tp[0], tp[1]), func(t *testing.T) {
			rec := &writeRecorder{}
			r := newRig(t, rigConfig{preTP: tp[0], decTP: tp[1], layers: layersN, wrap: rec.wrap})
			defer r.close()
			src, dst := []int{3, 9, 10, 20, 21, 22, 40, 7}, []int{5, 6, 30, 31, 2, 11, 12, 50}
			const seed, spoil, tokens = 11, 12, 8*16 - 5
			for _, l := range r.preLayout {
				fill(t, l, src, spoil, tokens) // nothing computed yet
			}
			for _, l := range r.decLayout {
				zero(t, l, dst)
			}
			want := uint64(max(len(r.consumers)/len(r.producers), 1))
			registerReq(t, r, dst, want)
			writes := uint64(0)
			// step computes blocks [b0, b1) of src in layers [lo, hi), reports
			// blocks[:b1] final in n layers (0: all), waits for decode to hold
			// them and spoils prefill's copy.
			step := func(b0, b1, lo, hi, n int) {
				t.Helper()
				for i, p := range r.producers {
					fillLayers(t, r.preLayout[i], src[b0:b1], b0*16, tokens, lo, hi, seed)
					require.NoError(t, reportLayers(p, src[:b1], tokens, n))
				}
				writes += want
				for _, p := range r.producers {
					eventually(t, "the progressive WRITEs", func() bool { return extra(t, p.Stats(), "progressive_writes") == writes })
				}
				for i, l := range r.decLayout {
					eventually(t, fmt.Sprintf("decode rank %d has blocks %d..%d in layers [%d, %d)", i, b0, b1-1, lo, hi),
						func() bool { return holdsLayers(t, l, dst[b0:b1], b0*16, tokens, lo, hi, seed) })
				}
				for i := range r.producers {
					fillLayers(t, r.preLayout[i], src[b0:b1], b0*16, tokens, lo, hi, spoil)
				}
			}
			step(0, 4, 0, 1, 1)
			step(0, 4, 1, 3, 3)
			step(0, 4, 3, 4, 0)
			step(4, 8, 0, 2, 2)
			require.Empty(t, r.consumers[0].Drain(), "no result before the finish")
			for i, p := range r.producers {
				fillLayers(t, r.preLayout[i], src[4:], 64, tokens, 2, layersN, seed)
				_, err := p.RequestFinished("req", src)
				require.NoError(t, err)
			}
			for i, c := range r.consumers {
				got := await(t, c, 1)
				require.NoError(t, got[0].Err)
				require.True(t, holdsLayers(t, r.decLayout[i], dst, 0, tokens, 0, layersN, seed), "decode rank %d", i)
			}
			writtenOnce(t, r, rec, 0, dst)
			for _, p := range r.producers {
				require.Zero(t, extra(t, p.Stats(), "progressive_skipped"))
				freedOnce(t, p, "req")
			}
		})
	}
}

// TestProgressLayersWholePrompt: one chunk, the whole prompt, reported
// in layers 1, 2 and 3 of 4: the final WRITE moves only the last layer.
func TestProgressLayersWholePrompt(t *testing.T) {
	rec := &writeRecorder{}
	r := newRig(t, rigConfig{layers: layersN, wrap: rec.wrap})
	defer r.close()
	src, dst := []int{8, 1, 2, 30, 31}, []int{4, 5, 6, 9, 60}
	const seed, spoil, tokens = 3, 4, 5*16 - 7
	l, p := r.preLayout[0], r.producers[0]
	fill(t, l, src, spoil, tokens)
	zero(t, r.decLayout[0], dst)
	registerReq(t, r, dst, 1)
	for n := 1; n < layersN; n++ {
		fillLayers(t, l, src, 0, tokens, n-1, n, seed)
		require.NoError(t, reportLayers(p, src, tokens, n))
		eventually(t, fmt.Sprintf("decode holds layer %d", n-1), func() bool { return holdsLayers(t, r.decLayout[0], dst, 0, tokens, n-1, n, seed) })
		fillLayers(t, l, src, 0, tokens, n-1, n, spoil)
	}
	fillLayers(t, l, src, 0, tokens, layersN-1, layersN, seed)
	finishWhole(t, r, src, dst, seed, tokens)
	require.Equal(t, uint64(layersN-1), extra(t, p.Stats(), "progressive_writes"))
	rec.mu.Lock()
	last := len(rec.writes) - 1
	require.Len(t, rec.writes, layersN)
	require.True(t, strings.HasPrefix(string(rec.writes[last].notif), "req:"), "the completion rides the last WRITE")
	rec.mu.Unlock()
	require.Equal(t, []int{layersN - 1}, layersOf(r, rec, last), "the final WRITE moves the last layer only")
	for w := range last {
		require.Equal(t, []int{w}, layersOf(r, rec, w), "progressive WRITE %d", w)
	}
	writtenOnce(t, r, rec, 0, dst)
	freedOnce(t, p, "req")
}

// TestProgressLayersRefusals: a per-layer report out of range, one whose
// layers go backwards, one whose tail grows while the previous tail is not
// final in every layer: each refused with what was wrong, nothing changed
// (the next good report goes on from the state before).
func TestProgressLayersRefusals(t *testing.T) {
	r := newRig(t, rigConfig{layers: layersN})
	defer r.close()
	p := r.producers[0]
	for _, c := range []struct {
		blocks []int
		layers int
		want   string
	}{
		{[]int{1}, -1, `request "req": FinalLayers is -1, want 0..4 (the rank's layers; 0 or 4: every layer)`},
		{[]int{1}, 5, `request "req": FinalLayers is 5, want 0..4 (the rank's layers; 0 or 4: every layer)`},
	} {
		err := reportLayers(p, c.blocks, 64, c.layers)
		require.ErrorIs(t, err, connector.ErrInvalid)
		require.EqualError(t, err, "pushconn: invalid argument: "+c.want)
	}
	require.Zero(t, p.Held())
	require.NoError(t, reportLayers(p, []int{1, 2}, 64, 0))
	require.NoError(t, reportLayers(p, []int{1, 2, 3}, 64, 2))
	require.NoError(t, reportLayers(p, []int{1, 2, 3}, 64, 2)) // nothing new
	for _, c := range []struct {
		blocks []int
		layers int
		want   string
	}{
		{[]int{1, 2, 3}, 1, `request "req": blocks 2..2 reported final in 1 layers, before in 2 (layers do not go backwards)`},
		{[]int{1, 2, 3, 4}, 3, `request "req": blocks 3..3 reported final in layers [0, 3) while blocks 2..2 are final in 2 of 4 layers only (a chunk ends in every layer before the next starts)`},
		{[]int{1, 2, 4}, 3, `request "req": the final blocks [1 2 4] do not extend those reported before (3 blocks)`},
		{[]int{1, 2, 3}, 9, `request "req": FinalLayers is 9, want 0..4 (the rank's layers; 0 or 4: every layer)`},
	} {
		err := reportLayers(p, c.blocks, 64, c.layers)
		require.ErrorIs(t, err, connector.ErrInvalid)
		require.EqualError(t, err, "pushconn: invalid argument: "+c.want)
	}
	st, ok := p.progressOf("req")
	require.True(t, ok)
	require.Equal(t, progressState{h: st.h, blocks: []int{1, 2, 3}, final: 2, layers: 2, tokens: 64}, st, "nothing changed")
	// Every layer (4 is 0), with a block more: the tail is final, so it may grow.
	require.NoError(t, reportLayers(p, []int{1, 2, 3, 4}, 64, layersN))
	require.NoError(t, reportLayers(p, []int{1, 2, 3, 4}, 64, 1)) // no tail: nothing new
	st, _ = p.progressOf("req")
	require.Equal(t, progressState{h: st.h, blocks: []int{1, 2, 3, 4}, final: 4, tokens: 64}, st)
	_, err := p.RequestFinished("req", []int{1, 2, 3, 4})
	require.NoError(t, err)
	require.NoError(t, p.Abort("req"))
	freedOnce(t, p, "req")
}

// progressOf returns the Producer's progress state of id.
func (p *Producer) progressOf(id string) (progressState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.progress[id]
	return st, ok
}

// TestProgressLayersAbortMidWay: prefill aborts while a per-layer WRITE
// moves over a slow link: the blocks are freed once, after it ended, and
// decode's abort ends its request.
func TestProgressLayersAbortMidWay(t *testing.T) {
	r := newRig(t, rigConfig{layers: layersN, fabric: []loopback.FabricOption{loopback.WithModel(loopback.Bandwidth(2e6, time.Millisecond))}})
	defer r.close()
	src, dst := blocksFrom(0, 16), blocksFrom(20, 16)
	registerReq(t, r, dst, 1)
	p := r.producers[0]
	require.NoError(t, reportLayers(p, src, 16*16, 1))
	eventually(t, "the per-layer WRITE", func() bool { return extra(t, p.Stats(), "progressive_writes") == 1 })
	require.NoError(t, p.Abort("req"))
	freedOnce(t, p, "req")
	require.NoError(t, r.consumers[0].Abort("req"))
	got := await(t, r.consumers[0], 1)
	require.ErrorIs(t, got[0].Err, connector.ErrAborted)
}

// TestProgressLayersCancelMidWay: decode cancels its registration while a
// per-layer WRITE of it moves: decode's result waits for prefill's answer,
// which waits for the WRITE; once decode has it, nothing more is written
// into its blocks, although prefill reports the rest and finishes.
func TestProgressLayersCancelMidWay(t *testing.T) {
	r := newRig(t, rigConfig{layers: layersN, fabric: []loopback.FabricOption{loopback.WithModel(loopback.Bandwidth(2e6, time.Millisecond))}})
	defer r.close()
	src, dst := blocksFrom(0, 16), blocksFrom(20, 16)
	const tokens = 16 * 16
	registerReq(t, r, dst, 1)
	p, c := r.producers[0], r.consumers[0]
	require.NoError(t, reportLayers(p, src, tokens, 1))
	eventually(t, "the per-layer WRITE", func() bool { return extra(t, p.Stats(), "progressive_writes") == 1 })
	require.NoError(t, c.Abort("req"))
	got := await(t, c, 1)
	require.ErrorIs(t, got[0].Err, connector.ErrAborted)
	zero(t, r.decLayout[0], dst)
	require.NoError(t, reportLayers(p, src, tokens, 3))
	_, err := p.RequestFinished("req", src)
	require.NoError(t, err)
	require.NoError(t, p.Abort("req")) // no registration will come
	freedOnce(t, p, "req")
	require.True(t, allZero(t, r.decLayout[0], dst), "written after decode had its answer")
	require.Equal(t, uint64(1), extra(t, p.Stats(), "progressive_writes"))
}

// TestProgressLayersWriteFails: a per-layer WRITE that fails in flight
// turns progress off for its registration: the final WRITE moves every
// block in every layer, and decode's bytes are right.
func TestProgressLayersWriteFails(t *testing.T) {
	rec := &writeRecorder{}
	r := newRig(t, rigConfig{layers: layersN, wrap: rec.wrap})
	defer r.close()
	src, dst := blocksFrom(0, 6), []int{40, 2, 7, 8, 9, 33}
	const seed, tokens = 17, 6*16 - 3
	l, p := r.preLayout[0], r.producers[0]
	fill(t, l, src, seed, tokens)
	registerReq(t, r, dst, 1)
	id, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "prefill-0", Count: 1})
	require.NoError(t, err)
	require.NoError(t, reportLayers(p, src[:3], tokens, 2))
	eventually(t, "progress off", func() bool { return extra(t, p.Stats(), "progressive_skipped") == 1 })
	require.Equal(t, 1, r.fabric.Injected(id))
	require.NoError(t, reportLayers(p, src[:3], tokens, 3)) // off: not written
	finishWhole(t, r, src, dst, seed, tokens)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "progressive_writes"))
	writtenOnce(t, r, rec, 1, dst) // the final WRITE: everything
	freedOnce(t, p, "req")
}

// TestProgressLayersStagedWaits: a registration that takes staged parts
// writes no per-layer tail: the per-layer report waits for the chunk's
// report in every layer, which goes as one staged part, and the rest at
// the finish; every byte right.
func TestProgressLayersStagedWaits(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	rec := &writeRecorder{}
	r := stagingRig(t, rigConfig{layers: layersN, wrap: rec.wrap}, m)
	defer r.close()
	src, dst := []int{3, 9, 10, 20, 21, 22, 40, 7}, []int{5, 6, 30, 31, 2, 11, 12, 50}
	const seed, spoil, tokens = 21, 22, 8*16 - 5
	l, p := r.preLayout[0], r.producers[0]
	fill(t, l, src, spoil, tokens)
	zero(t, r.decLayout[0], dst)
	registerReq(t, r, dst, 1)
	fillLayers(t, l, src[:4], 0, tokens, 0, 2, seed)
	require.NoError(t, reportLayers(p, src[:4], tokens, 2))
	fillLayers(t, l, src[:4], 0, tokens, 2, layersN, seed)
	require.NoError(t, reportLayers(p, src[:4], tokens, 0))
	eventually(t, "the staged part", func() bool { return extra(t, p.Stats(), "progressive_staged_writes") == 1 })
	eventually(t, "the part scattered", func() bool { return extra(t, r.consumers[0].Stats(), "staged_parts_scattered") == 1 })
	require.True(t, holdsLayers(t, r.decLayout[0], dst[:4], 0, tokens, 0, layersN, seed))
	fill(t, l, src[:4], spoil, 64)
	fillLayers(t, l, src[4:], 64, tokens, 0, 1, seed)
	require.NoError(t, reportLayers(p, src, tokens, 1)) // waits
	fillLayers(t, l, src[4:], 64, tokens, 1, layersN, seed)
	finishWhole(t, r, src, dst, seed, tokens)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "progressive_writes"), "only the staged part before the finish")
	regions := l.NumRegions()
	want := []int{regions}
	for range rigChunks {
		want = append(want, regions/rigChunks)
	}
	require.Equal(t, want, rec.descs("prefill-0"), "descriptors of the part and the final chunks")
	slotsBack(t, r)
	freedOnce(t, p, "req")
}

// TestProgressLayersStage: a pipeline stage counts its layers from its
// first: stage 0 of a 3-layer model (layers 0 and 1) reports its first
// layer, which lands in decode's layer 0, and takes no more than its 2;
// stage 1 (layer 2) just finishes. Decode ends with every byte right,
// although stage 0's layer 0 was spoiled once it landed.
func TestProgressLayersStage(t *testing.T) {
	r := newStageRig(t, stageRigConfig{pp: 2, preTP: 1, decTP: 1})
	const seed, spoil, tokens = 11, 12, 3*16 + 5
	src, dst := []int{9, 3, 40, 7}, []int{1, 22, 5, 60}
	s0, s1 := r.preLayout[0], r.preLayout[1]
	require.Equal(t, []int{0, 2, 2, 1}, []int{s0.FirstLayer, s0.NumLayers, s1.FirstLayer, s1.NumLayers})
	fillStage(t, s0, src, spoil, tokens)
	fillStage(t, s1, src, seed, tokens)
	for _, c := range r.consumers {
		require.NoError(t, c.Register("req", Coordinates(r.pre), dst))
	}
	for _, p := range r.producers {
		admitted(t, p, 1)
	}
	p := r.producers[0]
	err := reportLayers(p, src, tokens, 3)
	require.EqualError(t, err, `pushconn: invalid argument: request "req": FinalLayers is 3, want 0..2 (the rank's layers; 0 or 2: every layer)`)
	fillStageLayers(t, s0, src, 0, tokens, 0, 1, seed)
	require.NoError(t, reportLayers(p, src, tokens, 1))
	eventually(t, "decode holds layer 0", func() bool { return holdsLayers(t, r.decLayout[0], dst, 0, tokens, 0, 1, seed) })
	fillStageLayers(t, s0, src, 0, tokens, 0, 1, spoil)
	fillStageLayers(t, s0, src, 0, tokens, 1, 2, seed)
	for _, pr := range r.producers {
		_, err := pr.RequestFinished("req", src, withTokens(tokens))
		require.NoError(t, err)
	}
	got := await(t, r.consumers[0], 1)
	require.NoError(t, got[0].Err)
	require.Equal(t, 2*stageLayers*tokens*r.decLayout[0].KVHeads*headBytes, check(t, r.decLayout[0], dst, 0, seed, tokens))
	require.Equal(t, uint64(1), extra(t, p.Stats(), "progressive_writes"))
	for _, pr := range r.producers {
		freedOnce(t, pr, "req")
	}
}

// TestProgressLayersPrefixHit: decode holds the request's first two
// blocks (a prefix-cache hit) and registers the other four: per-layer
// WRITEs take only those, each (block, region) of them once.
func TestProgressLayersPrefixHit(t *testing.T) {
	rec := &writeRecorder{}
	r := newRig(t, rigConfig{layers: layersN, wrap: rec.wrap})
	defer r.close()
	src, dst := []int{8, 1, 2, 30, 31, 33}, []int{4, 5, 6, 9}
	const seed, spoil, tokens = 5, 6, 6*16 - 2
	l, p := r.preLayout[0], r.producers[0]
	fill(t, l, src, spoil, tokens)
	zero(t, r.decLayout[0], dst)
	registerReq(t, r, dst, 1)
	fillLayers(t, l, src[:3], 0, tokens, 0, 2, seed)
	require.NoError(t, reportLayers(p, src[:3], tokens, 2)) // block 2 of decode's: layers 0, 1
	eventually(t, "decode holds block 2 in layers 0 and 1", func() bool { return holdsLayers(t, r.decLayout[0], dst[:1], 32, tokens, 0, 2, seed) })
	fillLayers(t, l, src[:3], 0, tokens, 0, 2, spoil)
	fillLayers(t, l, src[:4], 0, tokens, 2, layersN, seed)
	fillLayers(t, l, src[3:4], 48, tokens, 0, 2, seed)
	require.NoError(t, reportLayers(p, src[:4], tokens, 0))
	eventually(t, "decode holds block 3", func() bool { return holdsLayers(t, r.decLayout[0], dst[:2], 32, tokens, 0, layersN, seed) })
	fill(t, l, src[:4], spoil, 64)
	fillLayers(t, l, src[4:], 64, tokens, 0, layersN, seed)
	_, err := p.RequestFinished("req", src)
	require.NoError(t, err)
	got := await(t, r.consumers[0], 1)
	require.NoError(t, got[0].Err)
	require.Positive(t, check(t, r.decLayout[0], dst, 2, seed, tokens))
	require.Equal(t, uint64(2), extra(t, p.Stats(), "progressive_writes"))
	writtenOnce(t, r, rec, 0, dst)
	freedOnce(t, p, "req")
}
