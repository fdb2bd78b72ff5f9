package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

func TestResultNames(t *testing.T) {
	for _, c := range []struct {
		r    Result
		name string
	}{
		{Success, "CUDA_SUCCESS"},
		{ErrorOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"},
		{ErrorNotReady, "CUDA_ERROR_NOT_READY"},
		{ErrorPeerAccessAlreadyEnabled, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
	} {
		if got := c.r.Name(); got != c.name {
			t.Errorf("Result(%d).Name() = %q, want %q", int(c.r), got, c.name)
		}
		if got := c.r.Error(); !strings.HasPrefix(got, fmt.Sprintf("%s (%d)", c.name, int(c.r))) {
			t.Errorf("Result(%d).Error() = %q", int(c.r), got)
		}
	}
	// A code outside the table, with no driver to ask, still reads.
	if !symbols.Load() {
		if got := Result(123456).Name(); got != "CUresult(123456)" {
			t.Errorf("unknown code: %q", got)
		}
	}
	for r, n := range names {
		if !strings.HasPrefix(n, "CUDA_") {
			t.Errorf("names[%d] = %q", int(r), n)
		}
	}
}

func TestErrorMatchesItsResult(t *testing.T) {
	err := fmt.Errorf("caller: %w", check("cuMemAlloc", ErrorOutOfMemory))
	if !errors.Is(err, ErrorOutOfMemory) || errors.Is(err, ErrorNotReady) {
		t.Fatalf("errors.Is on %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Op != "cuMemAlloc" || e.Result != ErrorOutOfMemory {
		t.Fatalf("errors.As on %v: %+v", err, e)
	}
	if !strings.HasPrefix(err.Error(), "caller: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)") {
		t.Fatalf("message %q", err)
	}
	if check("cuMemAlloc", Success) != nil {
		t.Fatal("Success is no error")
	}
}

// Each parameter sits at the start of its slot at its own width, whatever
// the byte order.
func TestPackArgs(t *testing.T) {
	slots := packArgs([]KernelArg{ArgU32(0xdeadbeef), ArgI32(-2), ArgU64(1 << 40)})
	if len(slots) != 3 {
		t.Fatalf("%d slots", len(slots))
	}
	if got := *(*uint32)(unsafe.Pointer(&slots[0])); got != 0xdeadbeef {
		t.Errorf("u32 slot reads %#x", got)
	}
	if got := *(*int32)(unsafe.Pointer(&slots[1])); got != -2 {
		t.Errorf("i32 slot reads %d", got)
	}
	if slots[2] != 1<<40 {
		t.Errorf("u64 slot reads %#x", slots[2])
	}
	if packArgs(nil) == nil || len(packArgs(nil)) != 0 {
		t.Error("no args, no slots")
	}
}
