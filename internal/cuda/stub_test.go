//go:build !cuda

package cuda

import (
	"errors"
	"strings"
	"testing"
)

// Without the cuda tag every entry point is a clear error naming the tag,
// never a call into a driver that is not there.
func TestUnavailableWithoutTag(t *testing.T) {
	err := Init()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "-tags cuda") {
		t.Fatalf("Init = %v", err)
	}
	_, err1 := DeviceCount()
	_, err2 := RetainPrimary(0)
	_, err3 := CanAccessPeer(0, 1)
	_, err4 := MemAlloc(1)
	_, err5 := MemAllocHost(1)
	_, err6 := ModuleLoadData("")
	_, err7 := StreamCreate(0)
	for i, err := range []error{err1, err2, err3, err4, err5, err6, err7,
		CtxSynchronize(), MemFree(1), MemcpyHtoD(0, []byte{1}), MemcpyDtoH([]byte{1}, 0),
		MemcpyDtoD(0, 0, 1), MemsetD8(0, 0, 1), LaunchKernel(Function{}, 1, 1, 0, Stream{}),
		Stream{}.Synchronize()} {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("call %d: %v, want ErrUnavailable", i, err)
		}
	}
}
