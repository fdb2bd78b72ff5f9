package engine

import (
	"crypto/rand"
	"encoding/binary"
)

// NewIncarnation returns a random non-zero 64-bit id for one start of a
// rank. Random rather than a counter or a timestamp: a restarted process
// remembers nothing, and two starts within one clock tick must differ.
// Zero is reserved for "not said".
func NewIncarnation() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}
