package pushconn

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
)

// The steps the progressive-push tests (progress_test.go,
// progress_staged_test.go, progress_parts_test.go) share, on one request
// "req".

// registerReq registers "req" for dst on every decode rank and waits until
// every prefill rank admitted n registrations.
func registerReq(t testing.TB, r *rig, dst []int, n uint64) {
	t.Helper()
	for _, c := range r.consumers {
		require.NoError(t, c.Register("req", Coordinates(r.pre), dst))
	}
	for _, p := range r.producers {
		admitted(t, p, n)
	}
}

// finishRest finishes "req" with src on every prefill rank after the
// reported blocks src[:reported] moved: it spoils their bytes (seed
// spoil), so that decode's copy is right only if they do not move again,
// computes the rest (seed, from the reported blocks' end to tokens) and
// calls RequestFinished.
func finishRest(t testing.TB, r *rig, src []int, reported, seed, spoil, tokens int) {
	t.Helper()
	for i, p := range r.producers {
		l := r.preLayout[i]
		fill(t, l, src[:reported], spoil, reported*l.BlockSize)
		visit(t, l, src[reported:], reported*l.BlockSize, tokens, func(p *byte, region, head, token, b int) { *p = kvByte(seed, region, head, token, b) })
		_, err := p.RequestFinished("req", src)
		require.NoError(t, err)
	}
}

// awaitRight requires every decode rank's one result to be a success, its
// dst holding the bytes of seed up to tokens.
func awaitRight(t testing.TB, r *rig, dst []int, seed, tokens int) {
	t.Helper()
	for i, c := range r.consumers {
		got := await(t, c, 1)
		require.NoError(t, got[0].Err)
		require.Positive(t, check(t, r.decLayout[i], dst, 0, seed, tokens), "decode rank %d", i)
	}
}

// finishWhole finishes "req" with src on prefill rank 0 and requires decode
// rank 0's result to be a success, its dst holding the bytes of seed up to
// tokens.
func finishWhole(t testing.TB, r *rig, src, dst []int, seed, tokens int) {
	t.Helper()
	_, err := r.producers[0].RequestFinished("req", src)
	require.NoError(t, err)
	got := await(t, r.consumers[0], 1)
	require.NoError(t, got[0].Err)
	require.Positive(t, check(t, r.decLayout[0], dst, 0, seed, tokens))
}

// allZero reports whether every byte of blocks on l is 0.
func allZero(t testing.TB, l descriptors.Layout, blocks []int) bool {
	ok := true
	visit(t, l, blocks, 0, 1<<30, func(p *byte, _, _, _, _ int) {
		if *p != 0 {
			ok = false
		}
	})
	return ok
}

// slotsBack waits until every staging slot of the rig is free.
func slotsBack(t testing.TB, r *rig) {
	t.Helper()
	eventually(t, "every staging slot back", func() bool { pre, dec := inUse(r); return pre == 0 && dec == 0 })
}
