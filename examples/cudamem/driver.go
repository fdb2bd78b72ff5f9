//go:build cuda

package cudamem

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>

// Our own prototypes for the few driver entry points we use; the ABI is the
// CUDA driver's (CUresult is int, CUdeviceptr is 64-bit, handles are pointers).
typedef int (*fn_init)(unsigned int);
typedef int (*fn_count)(int*);
typedef int (*fn_dev_get)(int*, int);
typedef int (*fn_ctx_retain)(void**, int);
typedef int (*fn_ctx_release)(int);
typedef int (*fn_ctx_set)(void*);
typedef int (*fn_ctx_sync)(void);
typedef int (*fn_alloc)(uint64_t*, size_t);
typedef int (*fn_free)(uint64_t);
typedef int (*fn_htod)(uint64_t, const void*, size_t);
typedef int (*fn_dtoh)(void*, uint64_t, size_t);
typedef int (*fn_dtod)(uint64_t, uint64_t, size_t);
typedef int (*fn_memset)(uint64_t, unsigned char, size_t);
typedef int (*fn_peer)(uint64_t, void*, uint64_t, void*, size_t);
typedef int (*fn_errstr)(int, const char**);
typedef int (*fn_can_peer)(int*, int, int);
typedef int (*fn_enable_peer)(void*, unsigned int);

static struct {
	void *lib;
	fn_init init; fn_count count; fn_dev_get dev_get;
	fn_ctx_retain retain; fn_ctx_release release; fn_ctx_set set; fn_ctx_sync sync;
	fn_alloc alloc; fn_free free_; fn_htod htod; fn_dtoh dtoh; fn_dtod dtod;
	fn_memset memset_; fn_peer peer; fn_errstr errstr;
	fn_can_peer can_peer; fn_enable_peer enable_peer;
} cu;

// cudamem_load returns 0 on success, -1 if the library is missing, -2 if a
// symbol is missing.
static int cudamem_load(void) {
	if (cu.lib) return 0;
	void *l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!l) return -1;
#define SYM(f, name) if (!(cu.f = (void*)dlsym(l, name))) return -2;
	SYM(init, "cuInit") SYM(count, "cuDeviceGetCount") SYM(dev_get, "cuDeviceGet")
	SYM(retain, "cuDevicePrimaryCtxRetain") SYM(release, "cuDevicePrimaryCtxRelease_v2")
	SYM(set, "cuCtxSetCurrent") SYM(sync, "cuCtxSynchronize")
	SYM(alloc, "cuMemAlloc_v2") SYM(free_, "cuMemFree_v2")
	SYM(htod, "cuMemcpyHtoD_v2") SYM(dtoh, "cuMemcpyDtoH_v2") SYM(dtod, "cuMemcpyDtoD_v2")
	SYM(memset_, "cuMemsetD8_v2") SYM(peer, "cuMemcpyPeer") SYM(errstr, "cuGetErrorString")
	SYM(can_peer, "cuDeviceCanAccessPeer") SYM(enable_peer, "cuCtxEnablePeerAccess")
#undef SYM
	cu.lib = l;
	return cu.init(0);
}
static int cm_count(int *n) { return cu.count(n); }
static int cm_open(int ord, void **ctx) {
	int dev; int r = cu.dev_get(&dev, ord); if (r) return r;
	return cu.retain(ctx, dev);
}
static int cm_close(int ord) { int dev; int r = cu.dev_get(&dev, ord); if (r) return r; return cu.release(dev); }
static int cm_set(void *ctx) { return cu.set(ctx); }
static int cm_sync(void) { return cu.sync(); }
static int cm_alloc(uint64_t *p, size_t n) { return cu.alloc(p, n); }
static int cm_free(uint64_t p) { return cu.free_(p); }
static int cm_htod(uint64_t d, const void *s, size_t n) { return cu.htod(d, s, n); }
static int cm_dtoh(void *d, uint64_t s, size_t n) { return cu.dtoh(d, s, n); }
static int cm_dtod(uint64_t d, uint64_t s, size_t n) { return cu.dtod(d, s, n); }
static int cm_memset(uint64_t d, unsigned char v, size_t n) { return cu.memset_(d, v, n); }
static int cm_peer(uint64_t d, void *dc, uint64_t s, void *sc, size_t n) { return cu.peer(d, dc, s, sc, n); }
static int cm_can_peer(int *can, int a, int b) {
	int da, db; int r = cu.dev_get(&da, a); if (r) return r;
	r = cu.dev_get(&db, b); if (r) return r;
	return cu.can_peer(can, da, db);
}
static int cm_enable_peer(void *peer) { return cu.enable_peer(peer, 0); }
static const char *cm_errstr(int r) { const char *s = 0; if (cu.errstr) cu.errstr(r, &s); return s ? s : "unknown CUDA error"; }
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

var (
	loadOnce sync.Once
	loadErr  error
)

func load() error {
	loadOnce.Do(func() {
		switch r := C.cudamem_load(); r {
		case 0:
		case -1:
			loadErr = fmt.Errorf("%w: dlopen libcuda.so.1 failed", ErrUnavailable)
		case -2:
			loadErr = fmt.Errorf("%w: libcuda.so.1 lacks a driver entry point", ErrUnavailable)
		default:
			loadErr = fmt.Errorf("%w: cuInit: %s", ErrUnavailable, C.GoString(C.cm_errstr(r)))
		}
	})
	return loadErr
}

func check(op string, r C.int) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cudamem: %s: CUDA error %d: %s", op, int(r), C.GoString(C.cm_errstr(r)))
}

// Device is a CUDA device with its retained primary context. Its methods lock
// the calling goroutine to its OS thread and make the context current around
// every driver call, since the context binding is per thread.
type Device struct {
	ordinal int
	ctx     unsafe.Pointer // CUcontext, a driver handle, never Go memory
}

// Count returns the number of CUDA devices.
func Count() (int, error) {
	if err := load(); err != nil {
		return 0, err
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.cm_count(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Open retains the primary context of device ordinal.
func Open(ordinal int) (*Device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	var ctx unsafe.Pointer
	if err := check("cuDevicePrimaryCtxRetain", C.cm_open(C.int(ordinal), &ctx)); err != nil {
		return nil, err
	}
	return &Device{ordinal: ordinal, ctx: ctx}, nil
}

// Ordinal returns the device's ordinal, the DevID of its VRAM descriptors.
func (d *Device) Ordinal() int { return d.ordinal }

func (d *Device) do(op string, f func() C.int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuCtxSetCurrent", C.cm_set(d.ctx)); err != nil {
		return err
	}
	return check(op, f())
}

// Alloc allocates n bytes of device memory and returns its device address.
func (d *Device) Alloc(n uint64) (uint64, error) {
	var p C.uint64_t
	err := d.do("cuMemAlloc", func() C.int { return C.cm_alloc(&p, C.size_t(n)) })
	return uint64(p), err
}

// Free frees memory from Alloc.
func (d *Device) Free(ptr uint64) error {
	return d.do("cuMemFree", func() C.int { return C.cm_free(C.uint64_t(ptr)) })
}

// CopyHtoD copies src to device address dst (synchronous).
func (d *Device) CopyHtoD(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.do("cuMemcpyHtoD", func() C.int {
		return C.cm_htod(C.uint64_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)))
	})
}

// CopyDtoH copies len(dst) bytes from device address src (synchronous).
func (d *Device) CopyDtoH(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return d.do("cuMemcpyDtoH", func() C.int {
		return C.cm_dtoh(unsafe.Pointer(&dst[0]), C.uint64_t(src), C.size_t(len(dst)))
	})
}

// CopyDtoD copies n bytes between device addresses of this device and waits
// for the copy to finish.
func (d *Device) CopyDtoD(dst, src, n uint64) error {
	return d.do("cuMemcpyDtoD", func() C.int {
		if r := C.cm_dtod(C.uint64_t(dst), C.uint64_t(src), C.size_t(n)); r != 0 {
			return r
		}
		return C.cm_sync()
	})
}

// Memset sets n bytes at ptr to v and waits for it.
func (d *Device) Memset(ptr uint64, v byte, n uint64) error {
	return d.do("cuMemsetD8", func() C.int {
		if r := C.cm_memset(C.uint64_t(ptr), C.uchar(v), C.size_t(n)); r != 0 {
			return r
		}
		return C.cm_sync()
	})
}

// MemsetAsync sets n bytes at ptr to v without waiting for it: the driver
// orders it before later work on the default stream, and Sync waits for it.
// Zeroing many ranges then costs one wait instead of one each.
func (d *Device) MemsetAsync(ptr uint64, v byte, n uint64) error {
	return d.do("cuMemsetD8", func() C.int { return C.cm_memset(C.uint64_t(ptr), C.uchar(v), C.size_t(n)) })
}

// Sync waits for all work on the device's context.
func (d *Device) Sync() error { return d.do("cuCtxSynchronize", func() C.int { return C.cm_sync() }) }

// CopyPeer copies n bytes from src on srcDev to dst on dstDev and waits for it.
func CopyPeer(dst uint64, dstDev *Device, src uint64, srcDev *Device, n uint64) error {
	return dstDev.do("cuMemcpyPeer", func() C.int {
		if r := C.cm_peer(C.uint64_t(dst), dstDev.ctx, C.uint64_t(src), srcDev.ctx, C.size_t(n)); r != 0 {
			return r
		}
		return C.cm_sync()
	})
}

// SetCurrent makes the device's primary context current on the calling OS
// thread and leaves it so. Native code that issues CUDA work without making a
// context current itself (UCX on a thread Go picked) needs one there; callers
// lock the goroutine to its thread first so the binding reaches the thread
// they prepared.
func (d *Device) SetCurrent() error { return check("cuCtxSetCurrent", C.cm_set(d.ctx)) }

// CanAccessPeer reports whether device a can address device b's memory
// directly (NVLink or PCIe peer to peer).
func CanAccessPeer(a, b int) (bool, error) {
	if err := load(); err != nil {
		return false, err
	}
	var can C.int
	if err := check("cuDeviceCanAccessPeer", C.cm_can_peer(&can, C.int(a), C.int(b))); err != nil {
		return false, err
	}
	return can != 0, nil
}

// errPeerAccessAlreadyEnabled is CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED.
const errPeerAccessAlreadyEnabled = 704

// EnablePeerAccess lets kernels and copies issued in d's context address
// peer's memory directly, so cuMemcpyPeer between them is a device-to-device
// copy rather than one staged through the host. Enabling it twice is not an
// error.
func (d *Device) EnablePeerAccess(peer *Device) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuCtxSetCurrent", C.cm_set(d.ctx)); err != nil {
		return err
	}
	if r := C.cm_enable_peer(peer.ctx); r != 0 && r != errPeerAccessAlreadyEnabled {
		return check("cuCtxEnablePeerAccess", r)
	}
	return nil
}

// Close releases the primary context retained by Open.
func (d *Device) Close() error {
	if d.ctx == nil {
		return nil
	}
	d.ctx = nil
	return check("cuDevicePrimaryCtxRelease", C.cm_close(C.int(d.ordinal)))
}
