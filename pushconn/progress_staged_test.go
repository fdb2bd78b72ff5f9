package pushconn

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// TestProgressStagedParts: with staging on both sides, a report's blocks
// go into decode's offered slot as one staged part (one descriptor per
// region), not into decode's blocks, and decode scatters the part when its
// PUSH_STAGED_PART lands; the final WRITE writes the rest chunk by chunk
// with the staged completions, decode scatters the blocks no part did,
// and every byte is right although prefill spoiled the reported blocks
// once their part landed. Every slot comes back.
func TestProgressStagedParts(t *testing.T) {
	for _, tp := range [][2]int{{1, 1}, {2, 2}} {
		t.Run(fmt.Sprintf("tp%dto%d", tp[0], tp[1]), func(t *testing.T) {
			m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
			rec := &writeRecorder{}
			r := stagingRig(t, rigConfig{preTP: tp[0], decTP: tp[1], wrap: rec.wrap}, m)
			defer r.close()
			rng := rand.New(rand.NewPCG(uint64(tp[0]), 3))
			src, dst := fragmented(rng, 8), fragmented(rng, 8)
			const seed, tokens = 21, 8*16 - 5
			for _, l := range r.preLayout {
				fill(t, l, src, seed+1, tokens) // not computed yet
			}
			for _, l := range r.decLayout {
				zero(t, l, dst)
			}
			registerReq(t, r, dst, 1)
			for i, p := range r.producers {
				fill(t, r.preLayout[i], src[:4], seed, 64)
				require.NoError(t, p.Progress("req", src[:4], tokens))
			}
			for _, p := range r.producers {
				eventually(t, "the staged parts", func() bool { return extra(t, p.Stats(), "progressive_staged_writes") == 1 })
				require.Equal(t, uint64(1), extra(t, p.Stats(), "progressive_writes"))
				require.Zero(t, extra(t, p.Stats(), "progressive_deferred"))
			}
			// The part landed in decode's slot with its PUSH_STAGED_PART:
			// decode scattered it into its blocks before the finish.
			for i, c := range r.consumers {
				eventually(t, "the part scattered", func() bool { return extra(t, c.Stats(), "staged_parts_scattered") == 1 })
				require.Positive(t, check(t, r.decLayout[i], dst[:4], 0, seed, 64), "decode rank %d's blocks before the finish", i)
			}
			require.Empty(t, r.consumers[0].Drain(), "no result before the finish")
			finishRest(t, r, src, 4, seed, seed+2, tokens)
			awaitRight(t, r, dst, seed, tokens)
			regions := r.preLayout[0].NumRegions()
			want := []int{regions} // the part: one run per region
			for range rigChunks {  // the rest: a chunk per region here, one run each
				want = append(want, regions/rigChunks)
			}
			require.Equal(t, want, rec.descs("prefill-0"), "descriptors of prefill rank 0's WRITEs")
			slotsBack(t, r)
			for _, p := range r.producers {
				freedOnce(t, p, "req")
				require.Zero(t, extra(t, p.Stats(), "staging_no_slot"))
			}
		})
	}
}

// TestProgressStagedDirectWhereNotSame: between ranks whose blocks do not
// map one to one (TP 1 -> 2: decode holds half the heads), a staging rank
// writes its parts into decode's blocks as before, and the rest directly.
func TestProgressStagedDirectWhereNotSame(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	r := stagingRig(t, rigConfig{preTP: 1, decTP: 2}, m)
	defer r.close()
	src, dst := []int{3, 9, 10, 20}, []int{5, 6, 30, 31}
	const seed, tokens = 4, 64
	fill(t, r.preLayout[0], src[:2], seed, 32)
	registerReq(t, r, dst, 2)
	p := r.producers[0]
	require.NoError(t, p.Progress("req", src[:2], tokens))
	for i, l := range r.decLayout {
		eventually(t, fmt.Sprintf("decode rank %d holds the part", i), func() bool { return holds(t, l, dst[:2], seed, 32) })
	}
	fill(t, r.preLayout[0], src, seed, tokens)
	_, err := p.RequestFinished("req", src)
	require.NoError(t, err)
	awaitRight(t, r, dst, seed, tokens)
	require.Equal(t, uint64(2), extra(t, p.Stats(), "progressive_writes"))
	require.Zero(t, extra(t, p.Stats(), "progressive_staged_writes"))
	slotsBack(t, r)
	freedOnce(t, p, "req")
}

// TestProgressStagedNoSlot: a report that finds every prefill slot taken
// is put off (progressive_deferred) and its blocks go with the next
// report's part; a finish that finds none writes the rest from the blocks
// into decode's slot, chunk by chunk with the staged completions. Every
// byte is right and no wait is involved.
func TestProgressStagedNoSlot(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	rec := &writeRecorder{}
	r := stagingRig(t, rigConfig{preTP: 1, decTP: 1, wrap: rec.wrap}, m)
	defer r.close()
	rng := rand.New(rand.NewPCG(9, 9))
	src, dst := fragmented(rng, 8), fragmented(rng, 8)
	const seed, tokens = 13, 8 * 16
	fill(t, r.preLayout[0], src, seed, tokens)
	registerReq(t, r, dst, 1)
	p := r.producers[0]
	hog := func() []staging.Slot {
		var out []staging.Slot
		for {
			s, ok := p.pool.Acquire("hog")
			if !ok {
				return out
			}
			out = append(out, s)
		}
	}
	unhog := func(s []staging.Slot) {
		for _, x := range s {
			require.NoError(t, p.pool.Release(x))
		}
	}
	held := hog()
	require.Len(t, held, 2)
	require.NoError(t, p.Progress("req", src[:2], tokens))
	eventually(t, "the part put off", func() bool { return extra(t, p.Stats(), "progressive_deferred") == 1 })
	require.Zero(t, extra(t, p.Stats(), "progressive_writes"))
	unhog(held)
	require.NoError(t, p.Progress("req", src[:5], tokens))
	eventually(t, "the next part", func() bool { return extra(t, p.Stats(), "progressive_staged_writes") == 1 })
	eventually(t, "the part's WRITE ended", func() bool { pre, _ := inUse(r); return pre == 0 })
	held = hog()
	finishWhole(t, r, src, dst, seed, tokens)
	unhog(held)
	regions := r.preLayout[0].NumRegions()
	var runs int // the rest, blocks 5..7, from the blocks: one descriptor per run and region
	for k := 5; k < 8; k++ {
		if k == 5 || src[k] != src[k-1]+1 {
			runs++
		}
	}
	want := []int{regions}
	for range rigChunks {
		want = append(want, runs*regions/rigChunks)
	}
	require.Equal(t, want, rec.descs("prefill-0"), "the part from the slot, the rest from the blocks chunk by chunk")
	require.Equal(t, uint64(1), extra(t, p.Stats(), "progressive_writes"))
	require.Equal(t, uint64(2), extra(t, p.Stats(), "staging_no_slot"))
	slotsBack(t, r)
	freedOnce(t, p, "req")
}

// TestProgressStagedAbortMidWay: prefill aborts a request while its
// staged part moves over a slow link; decode cancels. The blocks are
// freed once, the slots come back once, decode's result is an abort.
func TestProgressStagedAbortMidWay(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	r := stagingRig(t, rigConfig{preTP: 1, decTP: 1, fabric: []loopback.FabricOption{loopback.WithModel(loopback.Bandwidth(1e6, 20*time.Millisecond))}}, m)
	defer r.close()
	src, dst := []int{1, 7, 3, 9}, []int{8, 2, 10, 4}
	registerReq(t, r, dst, 1)
	p := r.producers[0]
	require.NoError(t, p.Progress("req", src[:3], 64))
	eventually(t, "the staged part posted", func() bool { return extra(t, p.Stats(), "progressive_staged_writes") == 1 })
	require.NoError(t, p.Abort("req"))
	freedOnce(t, p, "req")
	require.NoError(t, r.consumers[0].Abort("req"))
	got := await(t, r.consumers[0], 1)
	require.ErrorIs(t, got[0].Err, connector.ErrAborted)
	slotsBack(t, r)
	require.Empty(t, p.DrainFreed(), "freed once")
}

// TestProgressStagedPartFails: a staged part that fails in flight turns
// progress off for its registration (progressive_skipped), and the final
// WRITE moves everything: every byte right, slots back.
func TestProgressStagedPartFails(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	r := stagingRig(t, rigConfig{preTP: 1, decTP: 1}, m)
	defer r.close()
	rng := rand.New(rand.NewPCG(5, 5))
	src, dst := fragmented(rng, 6), fragmented(rng, 6)
	const seed, tokens = 17, 6*16 - 3
	fill(t, r.preLayout[0], src, seed, tokens)
	registerReq(t, r, dst, 1)
	p := r.producers[0]
	id, err := r.fabric.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "prefill-0", Count: 1})
	require.NoError(t, err)
	require.NoError(t, p.Progress("req", src[:3], tokens))
	eventually(t, "progress off", func() bool { return extra(t, p.Stats(), "progressive_skipped") == 1 })
	require.Equal(t, 1, r.fabric.Injected(id))
	finishWhole(t, r, src, dst, seed, tokens)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "progressive_staged_writes"))
	slotsBack(t, r)
	freedOnce(t, p, "req")
}
