package match

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkTable fails unless every slot in use is reached from its hash's
// home without passing an empty slot, and n counts the slots in use.
func checkTable(t *testing.T, tb *table) {
	t.Helper()
	used := 0
	for i, s := range tb.slots {
		if s.h == 0 {
			continue
		}
		used++
		found := false
		for j, ok := tb.first(s.h); ok; j, ok = tb.next(s.h, j) {
			if j == i {
				found = true
				break
			}
		}
		require.True(t, found, "slot %d (hash %#x) not reached from its home", i, s.h)
	}
	require.Equal(t, used, tb.n)
}

// Hashes that share a home, and runs that wrap past the last slot, stay
// reachable through inserts, removals (which shift the run back) and
// growth, against a map of what was inserted.
func TestTableCollisionsWrapAndGrowth(t *testing.T) {
	var tb table
	want := map[uint32]uint64{} // value → hash
	rng := rand.New(rand.NewPCG(3, 4))
	hashOf := func(i uint32) uint64 {
		switch i % 4 {
		case 0:
			return 1<<63 | 15 // all share one home, at the end of a 16-slot table
		case 1:
			return 1<<63 | uint64(rng.Uint32())<<4 | 14 // near the end: runs wrap
		}
		return 1<<63 | rng.Uint64()
	}
	for v := uint32(1); v <= 2000; v++ {
		h := hashOf(v)
		tb.insert(h, v, v^0xffff)
		want[v] = h
		if v%3 == 0 { // remove a random earlier one
			for k, h := range want {
				i, ok := tb.first(h)
				for ok && tb.slots[i].v != k {
					i, ok = tb.next(h, i)
				}
				require.True(t, ok, "value %d", k)
				require.Equal(t, k^0xffff, tb.slots[i].w)
				tb.removeAt(i)
				delete(want, k)
				break
			}
		}
		if v%97 == 0 {
			checkTable(t, &tb)
		}
	}
	checkTable(t, &tb)
	require.Equal(t, len(want), tb.n)
	require.LessOrEqual(t, 4*tb.n, 3*len(tb.slots), "kept at most three quarters full")
	for k, h := range want {
		i, ok := tb.first(h)
		for ok && tb.slots[i].v != k {
			i, ok = tb.next(h, i)
		}
		require.True(t, ok, "value %d lost", k)
	}
	// Emptied, it finds nothing and reuses its slots.
	for len(want) > 0 {
		for k, h := range want {
			i, ok := tb.first(h)
			for ok && tb.slots[i].v != k {
				i, ok = tb.next(h, i)
			}
			tb.removeAt(i)
			delete(want, k)
		}
	}
	require.Zero(t, tb.n)
	for _, s := range tb.slots {
		require.Zero(t, s, "no slot left behind")
	}
	size := len(tb.slots)
	tb.insert(1<<63|5, 1, 0)
	require.Len(t, tb.slots, size, "no growth for a reused table")
}
