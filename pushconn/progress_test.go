package pushconn

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// TestProgressiveWriteBeforeFinish: the blocks a prefill reports final go
// to decode before RequestFinished, and only the rest after it. Prefill's
// reported blocks are spoiled once their progressive WRITE landed, so
// decode's copy of them is right only if they moved early and were not
// moved again; the rest are filled only just before the finish.
func TestProgressiveWriteBeforeFinish(t *testing.T) {
	for _, tp := range [][2]int{{1, 1}, {2, 1}, {1, 2}} {
		t.Run(fmt.Sprintf("tp%dto%d", tp[0], tp[1]), func(t *testing.T) {
			r := newRig(t, rigConfig{preTP: tp[0], decTP: tp[1]})
			defer r.close()
			src, dst := []int{3, 9, 10, 20, 21, 22, 40, 7}, []int{5, 6, 30, 31, 2, 11, 12, 50}
			const seed, tokens = 11, 8*16 - 5
			for _, l := range r.preLayout {
				fill(t, l, src, seed+1, tokens) // not computed yet
			}
			for _, l := range r.decLayout {
				zero(t, l, dst)
			}
			want := uint64(max(len(r.consumers)/len(r.producers), 1))
			registerReq(t, r, dst, want)
			// The first chunk's four blocks are final.
			for i, p := range r.producers {
				fill(t, r.preLayout[i], src[:4], seed, 64)
				require.NoError(t, p.Progress("req", src[:4], tokens))
			}
			for i, l := range r.decLayout {
				eventually(t, fmt.Sprintf("decode rank %d has the first chunk", i), func() bool { return holds(t, l, dst[:4], seed, 64) })
			}
			for _, p := range r.producers {
				eventually(t, "the progressive WRITEs", func() bool { return extra(t, p.Stats(), "progressive_writes") == want })
			}
			require.Empty(t, r.consumers[0].Drain(), "no result before the finish")
			finishRest(t, r, src, 4, seed, seed+2, tokens) // the last chunk, tokens 64 on
			for i, c := range r.consumers {
				got := await(t, c, 1)
				require.NoError(t, got[0].Err)
				require.True(t, holds(t, r.decLayout[i], dst[:4], seed, 64), "decode rank %d: the first chunk", i)
				require.Positive(t, check(t, r.decLayout[i], dst[4:], 4, seed, tokens))
			}
			for _, p := range r.producers {
				freedOnce(t, p, "req")
			}
		})
	}
}

// TestProgressRefusals: what Progress refuses names the problem and
// changes nothing; a request that reported progress finishes only with
// blocks that start with the reported ones.
func TestProgressRefusals(t *testing.T) {
	r := newRig(t, rigConfig{})
	defer r.close()
	p := r.producers[0]
	for _, c := range []struct {
		name   string
		blocks []int
		tokens int
		want   string
	}{
		{"no tokens", []int{1}, 0, "tokens is 0"},
		{"more blocks than tokens", []int{1, 2, 3}, 20, "more than a prompt of 20 tokens"},
		{"block outside", []int{1, numBlocks}, 100, "outside"},
	} {
		err := p.Progress("x", c.blocks, c.tokens)
		require.ErrorIs(t, err, connector.ErrInvalid, c.name)
		require.ErrorContains(t, err, c.want, c.name)
	}
	require.Zero(t, p.Held())
	require.NoError(t, p.Progress("a", []int{1, 2}, 64))
	require.NoError(t, p.Progress("a", []int{1, 2}, 64)) // nothing new
	require.Equal(t, 1, p.Held())
	err := p.Progress("a", []int{1, 3, 4}, 64)
	require.ErrorIs(t, err, connector.ErrInvalid)
	require.ErrorContains(t, err, "do not extend")
	_, err = p.RequestFinished("a", []int{2, 1, 3})
	require.ErrorIs(t, err, connector.ErrInvalid)
	require.ErrorContains(t, err, "do not start with the 2 it reported final")
	_, err = p.RequestFinished("a", []int{1, 2, 3, 4})
	require.NoError(t, err)
	err = p.Progress("a", []int{1, 2, 3}, 64)
	require.ErrorIs(t, err, connector.ErrInvalid)
	require.ErrorContains(t, err, "already finished")
	// Aborted while it computes: freed once.
	require.NoError(t, p.Progress("b", []int{5}, 64))
	require.NoError(t, p.Abort("b"))
	require.NoError(t, p.Abort("a"))
	freedOnce(t, p, "a", "b")
	require.NoError(t, p.Close())
	require.True(t, errors.Is(p.Progress("c", []int{1}, 16), connector.ErrClosed))
}

// TestProgressAbortMidWay: prefill aborts a request after a progressive
// WRITE, decode cancels its registration: the blocks come back once on
// both sides, decode's result is an abort.
func TestProgressAbortMidWay(t *testing.T) {
	r := newRig(t, rigConfig{preTP: 1, decTP: 2})
	defer r.close()
	src, dst := []int{1, 2, 3, 4}, []int{8, 9, 10, 11}
	registerReq(t, r, dst, 2)
	p := r.producers[0]
	require.NoError(t, p.Progress("req", src[:2], 64))
	eventually(t, "progressive WRITEs", func() bool { return extra(t, p.Stats(), "progressive_writes") == 2 })
	require.NoError(t, p.Abort("req"))
	freedOnce(t, p, "req")
	for _, c := range r.consumers {
		require.NoError(t, c.Abort("req"))
		got := await(t, c, 1)
		require.ErrorIs(t, got[0].Err, connector.ErrAborted)
	}
}

// TestProgressFinishWhileWriting: reports come while a progressive WRITE
// still moves (a slow link), and the request finishes while one does: its
// final WRITE waits for it, and decode gets every byte once.
func TestProgressFinishWhileWriting(t *testing.T) {
	r := newRig(t, rigConfig{preTP: 1, decTP: 1, fabric: []loopback.FabricOption{loopback.WithModel(loopback.Bandwidth(2e6, time.Millisecond))}})
	defer r.close()
	src, dst := blocksFrom(0, 16), blocksFrom(20, 16)
	const seed, tokens = 5, 16 * 16
	fill(t, r.preLayout[0], src, seed, tokens)
	registerReq(t, r, dst, 1)
	p := r.producers[0]
	for k := 1; k < 16; k += 3 {
		require.NoError(t, p.Progress("req", src[:k], tokens))
		time.Sleep(time.Millisecond)
	}
	finishWhole(t, r, src, dst, seed, tokens)
	require.Positive(t, extra(t, p.Stats(), "progressive_writes"))
	freedOnce(t, p, "req")
}
