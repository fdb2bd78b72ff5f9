package nixl_test

import (
	"fmt"

	"github.com/gonixl/gonixl/nixl"
)

// Memory handed to NIXL lives off the Go heap: a Buffer is mmap'd, so C
// never holds a Go pointer, and its address goes into descriptors.
func ExampleAllocBuffer() {
	buf, err := nixl.AllocBuffer(1 << 20)
	if err != nil {
		panic(err)
	}
	defer buf.Free()
	copy(buf.Bytes(), "KV")
	regs := nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{buf.RegDesc()}}
	fmt.Println(len(buf.Bytes()), string(buf.Bytes()[:2]), len(regs.Descs))
	// Output: 1048576 KV 1
}
