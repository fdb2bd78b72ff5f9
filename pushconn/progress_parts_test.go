package pushconn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// TestStagedPartsScatterOnArrival: two reports of a request staged into
// decode's slot are scattered by decode as each part lands: after each,
// decode's blocks hold exactly the reported blocks' bytes and the others
// are untouched, with no result yet; at the finish decode scatters only
// the blocks no part did (its copied bytes say so), and every byte is
// right although prefill spoiled the reported blocks after their parts.
func TestStagedPartsScatterOnArrival(t *testing.T) {
	for _, tp := range [][2]int{{1, 1}, {2, 2}} {
		t.Run(fmt.Sprintf("tp%dto%d", tp[0], tp[1]), func(t *testing.T) {
			m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
			rec := &writeRecorder{}
			r := stagingRig(t, rigConfig{preTP: tp[0], decTP: tp[1], wrap: rec.wrap}, m)
			defer r.close()
			rng := rand.New(rand.NewPCG(uint64(tp[0]), 11))
			src, dst := fragmented(rng, 8), fragmented(rng, 8)
			const seed, tokens = 31, 8*16 - 7
			for _, l := range r.decLayout {
				zero(t, l, dst)
			}
			registerReq(t, r, dst, 1)
			regions := r.decLayout[0].NumRegions()
			for k, upTo := range []int{4, 6} {
				for i, p := range r.producers {
					fill(t, r.preLayout[i], src[:upTo], seed, upTo*16)
					require.NoError(t, p.Progress("req", src[:upTo], tokens))
				}
				for i, c := range r.consumers {
					eventually(t, fmt.Sprintf("part %d scattered on decode rank %d", k, i), func() bool {
						return extra(t, c.Stats(), "staged_parts_scattered") == uint64(k+1)
					})
					require.Positive(t, check(t, r.decLayout[i], dst[:upTo], 0, seed, upTo*16), "decode rank %d after part %d", i, k)
					require.True(t, allZero(t, r.decLayout[i], dst[upTo:]), "decode rank %d's later blocks after part %d", i, k)
					require.Equal(t, uint64(upTo*regions)*r.decLayout[i].BlockLen(), extra(t, c.Stats(), "staging_copied_bytes"), "decode rank %d scattered the parts' blocks", i)
					require.Empty(t, c.Drain(), "no result before the finish")
				}
			}
			finishRest(t, r, src, 6, seed, seed+5, tokens)
			for i, c := range r.consumers {
				got := await(t, c, 1)
				require.NoError(t, got[0].Err)
				require.Positive(t, check(t, r.decLayout[i], dst, 0, seed, tokens), "decode rank %d", i)
				// The finish scattered blocks 6 and 7 only.
				require.Equal(t, uint64(8*regions)*r.decLayout[i].BlockLen(), extra(t, c.Stats(), "staging_copied_bytes"), "decode rank %d's scatters", i)
				require.Equal(t, uint64(2), extra(t, c.Stats(), "staged_parts_scattered"))
				require.Zero(t, extra(t, c.Stats(), "staged_parts_dropped")+extra(t, c.Stats(), "staged_parts_rejected"))
				require.Zero(t, c.Stats().MalformedNotifications+c.Stats().UnknownNotifications)
			}
			parts := rec.notifs(pushwire.StagedPartPrefix)
			require.Len(t, parts, 2*tp[0], "one part notification per part and prefill rank")
			for _, msg := range parts {
				pt, err := pushwire.DecodeStagedPart([]byte(msg))
				require.NoError(t, err)
				require.Contains(t, [][2]int{{0, 4}, {4, 6}}, [2]int{pt.From, pt.To}, msg)
				require.Equal(t, "req", pt.ID)
				require.NotZero(t, pt.Seq, "the registration's seq")
			}
			slotsBack(t, r)
			for _, p := range r.producers {
				freedOnce(t, p, "req")
			}
		})
	}
}

// TestStagedPartsOldDecode: a decode rank that does not offer parts (as
// one that predates PUSH_STAGED_PART) gets no part notification; its
// blocks stay untouched until the finish, when its staged completions
// scatter the whole image, every byte right.
func TestStagedPartsOldDecode(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	rec := &writeRecorder{}
	r := stagingRig(t, rigConfig{preTP: 1, decTP: 1, wrap: rec.wrap}, m)
	defer r.close()
	c, p := r.consumers[0], r.producers[0]
	c.noStagingParts = true
	rng := rand.New(rand.NewPCG(4, 4))
	src, dst := fragmented(rng, 8), fragmented(rng, 8)
	const seed, tokens = 8, 8 * 16
	zero(t, r.decLayout[0], dst)
	registerReq(t, r, dst, 1)
	fill(t, r.preLayout[0], src[:5], seed, 80)
	require.NoError(t, p.Progress("req", src[:5], tokens))
	eventually(t, "the staged part", func() bool { return extra(t, p.Stats(), "progressive_staged_writes") == 1 })
	eventually(t, "the part's WRITE ended", func() bool { pre, _ := inUse(r); return pre == 0 })
	require.True(t, allZero(t, r.decLayout[0], dst), "decode's blocks before the finish")
	fill(t, r.preLayout[0], src, seed, tokens)
	finishWhole(t, r, src, dst, seed, tokens)
	require.Empty(t, rec.notifs(pushwire.StagedPartPrefix), "no part notification to a decode that did not offer parts")
	require.Len(t, rec.notifs(pushwire.StagedChunkPrefix), rigChunks)
	require.Zero(t, extra(t, c.Stats(), "staged_parts_scattered"))
	require.Equal(t, uint64(8*r.decLayout[0].NumRegions())*r.decLayout[0].BlockLen(), extra(t, c.Stats(), "staging_copied_bytes"), "the whole image scattered at the finish")
	require.Zero(t, c.Stats().MalformedNotifications+c.Stats().UnknownNotifications)
	slotsBack(t, r)
	freedOnce(t, p, "req")
}

// TestStagedPartsOldDecodeRouting: were a part notification to reach a
// decode that predates it, its poller would hand it to the plain
// completion handler (no route of its own): that reads it as the
// completion of request "PUSH_STAGED_PART:<from>:<to>:<id>", which no
// request is, and counts it unknown; the request is untouched.
func TestStagedPartsOldDecodeRouting(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	r := stagingRig(t, rigConfig{preTP: 1, decTP: 1}, m)
	defer r.close()
	c := r.consumers[0]
	c.poll.Handle(pushwire.StagedPartPrefix, c.core.onCompletion) // an old decode's routing
	src, dst := []int{4, 9, 2, 30}, []int{7, 8, 20, 3}
	const seed, tokens = 3, 64
	zero(t, r.decLayout[0], dst)
	registerReq(t, r, dst, 1)
	msg, err := pushwire.EncodeStagedPart("req", 1, 0, 2, regSeq(t, c, "req"))
	require.NoError(t, err)
	require.NoError(t, r.preAgents[0].GenNotif(r.decAgents[0].Name(), msg, nil))
	eventually(t, "the part counted unknown", func() bool { return c.Stats().UnknownNotifications == 1 })
	require.True(t, allZero(t, r.decLayout[0], dst))
	fill(t, r.preLayout[0], src, seed, tokens)
	finishWhole(t, r, src, dst, seed, tokens)
}

// TestStagedPartsBad: part notifications that do not fit change nothing
// and are counted apart: malformed bytes, blocks outside the image, a
// part scattered already (a duplicate), a part of another registration
// of the id, of an unknown request, and of a request already released
// (its blocks, the engine's again, are not written).
func TestStagedPartsBad(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	r := stagingRig(t, rigConfig{preTP: 1, decTP: 1}, m)
	defer r.close()
	c, p := r.consumers[0], r.producers[0]
	src, dst := []int{4, 9, 2, 30}, []int{7, 8, 20, 3}
	const seed, tokens = 5, 64
	zero(t, r.decLayout[0], dst)
	registerReq(t, r, dst, 1)
	seq := regSeq(t, c, "req")
	fill(t, r.preLayout[0], src[:2], seed, 32)
	require.NoError(t, p.Progress("req", src[:2], tokens))
	eventually(t, "the part scattered", func() bool { return extra(t, c.Stats(), "staged_parts_scattered") == 1 })
	require.Positive(t, check(t, r.decLayout[0], dst[:2], 0, seed, 32))
	from, to := r.preAgents[0], r.decAgents[0].Name()
	send := func(msg []byte) {
		t.Helper()
		require.NoError(t, from.GenNotif(to, msg, nil))
	}
	part := func(id string, a, b int, seq uint64) []byte {
		msg, err := pushwire.EncodeStagedPart(id, 1, a, b, seq)
		require.NoError(t, err)
		return msg
	}
	counts := func() [3]uint64 {
		s := c.Stats()
		return [3]uint64{extra(t, s, "staged_parts_rejected"), extra(t, s, "staged_parts_dropped"), s.MalformedNotifications}
	}
	for i, bad := range []struct {
		msg  []byte
		want [3]uint64
	}{
		{[]byte("PUSH_STAGED_PART:2:2:req:1"), [3]uint64{0, 0, 1}},
		{part("req", 2, 5, seq), [3]uint64{1, 0, 1}},   // the image has 4 blocks
		{part("req", 1, 3, seq), [3]uint64{2, 0, 1}},   // block 1 scattered already
		{part("req", 0, 2, seq), [3]uint64{3, 0, 1}},   // a duplicate
		{part("req", 2, 4, seq+1), [3]uint64{3, 1, 1}}, // another registration
		{part("other", 0, 1, seq), [3]uint64{3, 2, 1}}, // no such request
		{part("req", 2, 4, 0), [3]uint64{3, 3, 1}},     // no seq, the registration had one
	} {
		send(bad.msg)
		eventually(t, fmt.Sprintf("bad part %d counted", i), func() bool { return counts() == bad.want })
	}
	require.Equal(t, uint64(1), extra(t, c.Stats(), "staged_parts_scattered"))
	require.True(t, allZero(t, r.decLayout[0], dst[2:]), "blocks no good part named")
	fill(t, r.preLayout[0], src, seed, tokens)
	finishWhole(t, r, src, dst, seed, tokens)
	slotsBack(t, r)
	// Released: the blocks are the engine's; a late part writes nothing.
	zero(t, r.decLayout[0], dst)
	send(part("req", 2, 4, seq))
	eventually(t, "the late part dropped", func() bool { return counts() == [3]uint64{3, 4, 1} })
	require.True(t, allZero(t, r.decLayout[0], dst), "released blocks written")
	require.Equal(t, uint64(1), extra(t, c.Stats(), "staged_parts_scattered"))
	freedOnce(t, p, "req")
}

// TestStagedPartScatterFails: a part decode cannot scatter fails its
// request, but with the rank still expected (its final WRITE, into the
// slot, is still to come): decode cancels, and its result, and its slot,
// wait for prefill's ack. Prefill, which then aborts the request, writes
// nothing more and frees the blocks once; every slot comes back.
func TestStagedPartScatterFails(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 256<<10)
	r := stagingRig(t, rigConfig{preTP: 1, decTP: 1}, m)
	defer r.close()
	c, p := r.consumers[0], r.producers[0]
	c.cfg.Staging.Copier = &stagingtest.Copier{FailAt: 1}
	src, dst := []int{4, 9, 2, 30}, []int{7, 8, 20, 3}
	registerReq(t, r, dst, 1)
	fill(t, r.preLayout[0], src[:2], 6, 32)
	require.NoError(t, p.Progress("req", src[:2], 64))
	got := await(t, c, 1)
	require.ErrorIs(t, got[0].Err, errStaging)
	require.ErrorContains(t, got[0].Err, "part of blocks [0, 2)")
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_ack_received"), "the result waited for prefill's ack")
	require.Equal(t, uint64(1), extra(t, c.Stats(), "staging_failures"))
	require.Zero(t, extra(t, c.Stats(), "staged_parts_scattered"))
	require.NoError(t, p.Abort("req"))
	freedOnce(t, p, "req")
	slotsBack(t, r)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "progressive_writes"), "nothing written after the cancel")
}
