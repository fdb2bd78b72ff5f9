//go:build cuda

package cuda

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

// retainOrSkip retains device 0's primary context, or skips the test where
// there is no driver or no device.
func retainOrSkip(t *testing.T) *Context {
	t.Helper()
	n, err := DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("no CUDA device: %v (count %d)", err, n)
	}
	c, err := RetainPrimary(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Release(); err != nil {
			t.Error(err)
		}
		if err := c.Release(); err != nil {
			t.Errorf("second Release: %v", err)
		}
	})
	return c
}

// The table's names are the driver's.
func TestNamesAreTheDriversNames(t *testing.T) {
	retainOrSkip(t)
	for r, n := range names {
		if d := drvErrorName(r); d != n {
			t.Errorf("code %d: table says %s, driver says %q", int(r), n, d)
		}
	}
	if d := drvErrorString(ErrorOutOfMemory); d == "" {
		t.Error("cuGetErrorString gave nothing for CUDA_ERROR_OUT_OF_MEMORY")
	}
}

func TestMemory(t *testing.T) {
	c := retainOrSkip(t)
	const n = 1 << 20
	err := c.Do(func() error {
		a, err := MemAlloc(n)
		if err != nil {
			return err
		}
		defer MemFree(a)
		b, err := MemAlloc(n)
		if err != nil {
			return err
		}
		defer MemFree(b)
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*5 + 1)
		}
		if err := MemcpyHtoD(a, src); err != nil {
			return err
		}
		if err := MemsetD8(b, 0, n); err != nil {
			return err
		}
		if err := MemcpyDtoD(b, a, n); err != nil {
			return err
		}
		if err := CtxSynchronize(); err != nil {
			return err
		}
		got := make([]byte, n)
		if err := MemcpyDtoH(got, b); err != nil {
			return err
		}
		if !bytes.Equal(got, src) {
			t.Error("bytes differ after HtoD, DtoD, DtoH")
		}
		// Pinned host memory through a stream.
		h, err := MemAllocHost(4096)
		if err != nil {
			return err
		}
		defer h.Free()
		hb := unsafe.Slice((*byte)(h.Ptr()), h.Len())
		for i := range hb {
			hb[i] = 0x5A
		}
		s, err := StreamCreate(StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		if err := MemcpyHtoDAsync(b, h, 4096, s); err != nil {
			return err
		}
		if err := MemcpyHtoDAsync(b, h, 4097, s); !errors.Is(err, ErrorInvalidValue) {
			t.Errorf("copy past the pinned memory: %v", err)
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if done, err := s.Query(); !done || err != nil {
			t.Errorf("Query after Synchronize = %v, %v", done, err)
		}
		if err := MemcpyDtoH(got[:4096], b); err != nil {
			return err
		}
		if !bytes.Equal(got[:4096], hb) {
			t.Error("bytes differ after the async copy from pinned memory")
		}
		if err := h.Free(); err != nil {
			return err
		}
		return h.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFreeTwiceIsAnError(t *testing.T) {
	c := retainOrSkip(t)
	_ = c.Do(func() error {
		p, err := MemAlloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		if err := MemFree(p); err != nil {
			t.Fatal(err)
		}
		err = MemFree(p)
		var e *Error
		if !errors.As(err, &e) || e.Op != "cuMemFree" {
			t.Fatalf("second MemFree: %v", err)
		}
		t.Logf("second MemFree: %v", err)
		return nil
	})
}

// storeArgs writes its parameters, of three widths, to out: u32 at 0, s32
// at 4, u64 at 8.
const storeArgs = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry gonixl_store_args(
	.param .u64 out,
	.param .u32 a,
	.param .s32 b,
	.param .u64 c
)
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [out];
	cvta.to.global.u64 %rd2, %rd1;
	ld.param.u32 %r1, [a];
	ld.param.s32 %r2, [b];
	ld.param.u64 %rd3, [c];
	st.global.u32 [%rd2], %r1;
	st.global.s32 [%rd2+4], %r2;
	st.global.u64 [%rd2+8], %rd3;
	ret;
}
`

func TestLaunchKernel(t *testing.T) {
	c := retainOrSkip(t)
	err := c.Do(func() error {
		m, err := ModuleLoadData(storeArgs)
		if err != nil {
			return err
		}
		defer m.Unload()
		if _, err := m.Function("no_such_kernel"); !errors.Is(err, ErrorNotFound) {
			t.Errorf("a missing kernel: %v, want CUDA_ERROR_NOT_FOUND", err)
		}
		f, err := m.Function("gonixl_store_args")
		if err != nil {
			return err
		}
		if n, err := f.Attribute(FuncAttributeMaxThreadsPerBlock); err != nil || n <= 0 {
			t.Errorf("max threads per block = %d, %v", n, err)
		}
		out, err := MemAlloc(16)
		if err != nil {
			return err
		}
		defer MemFree(out)
		s, err := StreamCreate(StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		if err := LaunchKernel(f, 1, 1, 0, s, ArgU64(out), ArgU32(0xdeadbeef), ArgI32(-7), ArgU64(0x0123456789abcdef)); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		got := make([]byte, 16)
		if err := MemcpyDtoH(got, out); err != nil {
			return err
		}
		a := *(*uint32)(unsafe.Pointer(&got[0]))
		b := *(*int32)(unsafe.Pointer(&got[4]))
		d := *(*uint64)(unsafe.Pointer(&got[8]))
		if a != 0xdeadbeef || b != -7 || d != 0x0123456789abcdef {
			t.Errorf("kernel saw %#x, %d, %#x", a, b, d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBadImage(t *testing.T) {
	c := retainOrSkip(t)
	_ = c.Do(func() error {
		_, err := ModuleLoadData("not a module")
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("loading garbage: %v", err)
		}
		t.Logf("loading garbage: %v", err)
		return nil
	})
}
