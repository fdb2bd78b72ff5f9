package gpue2e

import (
	"bytes"
	"encoding/binary"
	"sync"
)

// The pattern repeats a pseudo-random table, so filling is a memory copy,
// and stamps every StampEvery bytes with the seed and the offset, so a byte
// run copied to another place, or left over from another seed, differs.
const (
	// StampEvery is the stamp period; blocks of any multiple of it that
	// move to another offset are caught.
	StampEvery = 4096
	tableLen   = 1 << 19
)

var (
	tablesMu sync.Mutex
	tables   = map[uint64][]byte{}
)

func table(seed uint64) []byte {
	tablesMu.Lock()
	defer tablesMu.Unlock()
	if t, ok := tables[seed]; ok {
		return t
	}
	t := make([]byte, tableLen)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i < tableLen; i += 8 {
		// splitmix64
		x += 0x9E3779B97F4A7C15
		z := x
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		binary.LittleEndian.PutUint64(t[i:], z^z>>31)
	}
	tables[seed] = t
	return t
}

func stamp(seed, off uint64) [8]byte {
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], seed<<40^off/StampEvery^0xA5A5_0000_0000)
	return s
}

// Fill writes into dst the pattern of seed for the absolute offsets off to
// off+len(dst): the same seed and offset always give the same byte.
func Fill(dst []byte, seed, off uint64) {
	t := table(seed)
	for i := 0; i < len(dst); {
		at := (off + uint64(i)) % tableLen
		i += copy(dst[i:], t[at:])
	}
	prev := off / StampEvery * StampEvery
	first := prev
	if off != prev {
		first += StampEvery
		if off < prev+8 { // dst starts inside the stamp at prev
			s := stamp(seed, prev)
			for k := off; k < prev+8 && k-off < uint64(len(dst)); k++ {
				dst[k-off] = s[k-prev]
			}
		}
	}
	for at := first; at < off+uint64(len(dst)); at += StampEvery {
		s := stamp(seed, at)
		copy(dst[at-off:], s[:])
	}
}

// Mismatch returns the index of the first byte of got that differs from the
// pattern of seed at offset off, or -1 if none does. scratch, if at least as
// long as got, is used instead of an allocation.
func Mismatch(got []byte, seed, off uint64, scratch []byte) int {
	if len(scratch) < len(got) {
		scratch = make([]byte, len(got))
	}
	want := scratch[:len(got)]
	Fill(want, seed, off)
	if bytes.Equal(got, want) {
		return -1
	}
	for i := range got {
		if got[i] != want[i] {
			return i
		}
	}
	return -1
}
