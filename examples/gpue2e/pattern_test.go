package gpue2e

import (
	"testing"
)

func TestFillIsAFunctionOfSeedAndOffset(t *testing.T) {
	const n = 3*StampEvery + 100
	whole := make([]byte, n)
	Fill(whole, 7, 1000)
	// Any sub-range filled on its own, at any alignment, is the same bytes.
	for _, r := range [][2]int{{0, n}, {1, 9}, {3093, 3100}, {3096, 3104}, {3090, 4000}, {5, n - 3}, {3096, 3097}} {
		part := make([]byte, r[1]-r[0])
		Fill(part, 7, 1000+uint64(r[0]))
		if i := Mismatch(part, 7, 1000+uint64(r[0]), nil); i != -1 {
			t.Fatalf("range %v: Mismatch %d on its own fill", r, i)
		}
		for i := range part {
			if part[i] != whole[r[0]+i] {
				t.Fatalf("range %v: byte %d is %#x, the whole fill has %#x", r, i, part[i], whole[r[0]+i])
			}
		}
	}
}

func TestMismatchFindsMovedAndStaleBytes(t *testing.T) {
	const block = 8 * StampEvery
	a := make([]byte, 2*block)
	Fill(a, 3, 0)
	if i := Mismatch(a, 3, 0, nil); i != -1 {
		t.Fatalf("intact fill: Mismatch %d", i)
	}
	// The second block checked as if it lay where the first does.
	if i := Mismatch(a[block:], 3, 0, nil); i != 0 {
		t.Fatalf("block moved by %d bytes: Mismatch %d, want 0 (the stamp)", block, i)
	}
	// Same offsets, another seed: stale data from another request.
	if i := Mismatch(a, 4, 0, make([]byte, len(a))); i < 0 || i >= 8 {
		t.Fatalf("other seed: Mismatch %d, want inside the first stamp", i)
	}
	a[block+17] ^= 1
	if i := Mismatch(a, 3, 0, nil); i != block+17 {
		t.Fatalf("one flipped bit: Mismatch %d, want %d", i, block+17)
	}
	// Moved by a whole table length: the stamps still differ.
	b := make([]byte, StampEvery)
	Fill(b, 3, tableLen)
	if i := Mismatch(b, 3, 0, nil); i != 0 {
		t.Fatalf("moved by the table length: Mismatch %d, want 0", i)
	}
}

func BenchmarkFill(b *testing.B) {
	buf := make([]byte, 64<<20)
	b.SetBytes(int64(len(buf)))
	for i := 0; b.Loop(); i++ {
		Fill(buf, 1, uint64(i)*uint64(len(buf)))
	}
}
