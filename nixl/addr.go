package nixl

import "unsafe"

// sliceAddr returns the address of b's first byte. Only used for memory that
// is not on the Go heap, whose address never moves.
func sliceAddr(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
