package match

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Deadlines pushed mostly in order, some earlier than the last (to the
// heap), come out in (at, b) order, through the run's slide-down and
// across compaction.
func TestDueQueueOrderAndCompaction(t *testing.T) {
	var q dueQueue
	rng := rand.New(rand.NewPCG(9, 10))
	var want []due
	at := int64(0)
	pop := func() {
		d, ok := q.front()
		require.True(t, ok)
		require.Equal(t, want[0], d)
		q.pop()
		want = want[1:]
	}
	for b := uint64(1); b <= 5000; b++ {
		at += int64(rng.IntN(3)) // equal deadlines too
		d := due{at: at, a: b, b: b}
		if rng.IntN(10) == 0 {
			d.at -= int64(rng.IntN(50)) // received before a handshake
		}
		q.push(d)
		want = append(want, d)
		slices.SortFunc(want, func(x, y due) int {
			if x.before(y) {
				return -1
			}
			if y.before(x) {
				return 1
			}
			return 0
		})
		if rng.IntN(3) == 0 {
			pop()
		}
		if b%1000 == 0 {
			// Compaction keeps the odd ones and their order.
			q.compact(func(d due) bool { return d.a%2 == 1 })
			want = slices.DeleteFunc(want, func(d due) bool { return d.a%2 == 0 })
			require.Equal(t, len(want), q.len())
		}
	}
	require.NotEmpty(t, q.heap, "some went to the heap")
	for len(want) > 0 {
		pop()
	}
	_, ok := q.front()
	require.False(t, ok)
	require.Zero(t, q.len())
}

// A slab reuses freed slots under a new generation, so a reference to
// the old one is known stale.
func TestSlabGenerations(t *testing.T) {
	var s slab[string]
	a := s.alloc()
	require.Equal(t, uint32(1), a, "slot 0 names none")
	s.items[a] = "x"
	ref := s.ref(a)
	i, ok := s.slotOf(ref)
	require.True(t, ok)
	require.Equal(t, a, i)
	s.release(a)
	require.Empty(t, s.items[a], "released slots hold nothing for the collector")
	_, ok = s.slotOf(ref)
	require.False(t, ok)
	b := s.alloc()
	require.Equal(t, a, b, "reused")
	_, ok = s.slotOf(ref)
	require.False(t, ok, "the old reference stays stale after reuse")
	_, ok = s.slotOf(s.ref(b))
	require.True(t, ok)
	_, ok = s.slotOf(1 << 20)
	require.False(t, ok, "a slot never allocated")
}

// Block boundaries: a run of exactly one block, compaction to an exact
// block and to nothing, and a block emptied at the front reused at the back.
func TestDueQueueBlockBoundaries(t *testing.T) {
	var q dueQueue
	for i := range 2 * dueBlockLen {
		q.push(due{at: int64(i), b: uint64(i)})
	}
	require.Len(t, q.blocks, 2)
	q.compact(func(d due) bool { return d.at < dueBlockLen })
	require.Len(t, q.blocks, 1)
	require.Equal(t, dueBlockLen, q.len())
	q.push(due{at: dueBlockLen, b: dueBlockLen})
	require.Len(t, q.blocks, 2, "a full block ends the run: the next push starts another")
	for i := range dueBlockLen {
		d, ok := q.front()
		require.True(t, ok)
		require.Equal(t, int64(i), d.at)
		q.pop()
	}
	require.Len(t, q.blocks, 1)
	require.NotNil(t, q.spare, "the emptied block is kept")
	spare := q.spare
	for i := 1; i <= dueBlockLen; i++ {
		q.push(due{at: int64(dueBlockLen + i), b: uint64(dueBlockLen + i)})
	}
	require.Same(t, spare, q.blocks[1], "and reused")
	q.compact(func(due) bool { return false })
	require.Zero(t, q.len())
	_, ok := q.front()
	require.False(t, ok)
	q.push(due{at: 7})
	d, ok := q.front()
	require.True(t, ok)
	require.Equal(t, int64(7), d.at)
}
