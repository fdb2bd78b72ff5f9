package match

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func listOf(x *keyIndex, sd side, k string) []uint32 {
	fin, reg := x.lookup(k, keyHash(k))
	e := fin
	if sd == regSide {
		e = reg
	}
	var out []uint32
	for ; e != 0; e = x.after(sd, e) {
		out = append(out, e)
	}
	return out
}

// A key's entries stay in arrival order on each side whichever of them
// leaves (oldest, middle, newest), the sides share the key's slot, and the
// slot goes when both sides are empty.
func TestKeyIndexOrderAndSharedSlot(t *testing.T) {
	var x keyIndex
	for e := uint32(1); e <= 5; e++ {
		x.add(finSide, e, "k", keyHash("k"))
	}
	x.add(regSide, 9, "k", keyHash("k"))
	x.add(regSide, 3, "", keyHash("")) // "" is a key like any other (the stripped id of "-1a2b3c4d")
	require.Equal(t, 2, x.t.n, "one slot per key for both sides")
	require.Equal(t, []uint32{1, 2, 3, 4, 5}, listOf(&x, finSide, "k"))
	x.remove(finSide, 3) // middle
	x.remove(finSide, 1) // oldest
	x.remove(finSide, 5) // newest
	require.Equal(t, []uint32{2, 4}, listOf(&x, finSide, "k"))
	x.add(finSide, 1, "k", keyHash("k")) // a reused slot number goes last
	require.Equal(t, []uint32{2, 4, 1}, listOf(&x, finSide, "k"))
	require.Equal(t, []uint32{9}, listOf(&x, regSide, "k"))
	require.Equal(t, []uint32{3}, listOf(&x, regSide, ""))
	require.Empty(t, listOf(&x, finSide, ""))
	require.Equal(t, [2]int{3, 2}, x.n)
	for _, e := range []uint32{2, 4, 1} {
		x.remove(finSide, e)
	}
	require.Equal(t, 2, x.t.n, "the registration still holds k's slot")
	x.remove(regSide, 9)
	require.Equal(t, 1, x.t.n)
	require.Empty(t, listOf(&x, regSide, "k"))
	require.Equal(t, []uint32{3}, listOf(&x, regSide, ""))
}

// Keys whose hashes are equal get slots of their own: the index compares
// the keys.
func TestKeyIndexHashCollision(t *testing.T) {
	var x keyIndex
	const h = 1<<63 | 42
	x.add(finSide, 1, "a", h)
	x.add(finSide, 2, "b", h)
	x.add(regSide, 3, "b", h)
	fin, reg := x.lookup("a", h)
	require.Equal(t, [2]uint32{1, 0}, [2]uint32{fin, reg})
	fin, reg = x.lookup("b", h)
	require.Equal(t, [2]uint32{2, 3}, [2]uint32{fin, reg})
	fin, reg = x.lookup("c", h)
	require.Equal(t, [2]uint32{0, 0}, [2]uint32{fin, reg})
	x.remove(finSide, 1)
	fin, _ = x.lookup("b", h)
	require.Equal(t, uint32(2), fin, "b survives a's slot being shifted away")
	x.remove(finSide, 2)
	x.remove(regSide, 3)
	require.Zero(t, x.t.n)
}
