//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

// gonixl's own prototypes for the driver entry points it uses, in the CUDA
// driver's ABI: CUresult and CUdevice are int, CUdeviceptr is 64-bit, the
// other handles (CUcontext, CUmodule, CUfunction, CUstream) are pointers.
// Go holds the handles as uintptr_t.
static struct {
	int (*init)(unsigned int);
	int (*dev_count)(int *);
	int (*dev_get)(int *, int);
	int (*can_peer)(int *, int, int);
	int (*ctx_retain)(void **, int);
	int (*ctx_release)(int);
	int (*ctx_set)(void *);
	int (*ctx_sync)(void);
	int (*ctx_enable_peer)(void *, unsigned int);
	int (*mem_alloc)(uint64_t *, size_t);
	int (*mem_free)(uint64_t);
	int (*mem_alloc_host)(void **, size_t);
	int (*mem_free_host)(void *);
	int (*htod)(uint64_t, const void *, size_t);
	int (*dtoh)(void *, uint64_t, size_t);
	int (*dtod)(uint64_t, uint64_t, size_t);
	int (*memset8)(uint64_t, unsigned char, size_t);
	int (*peer)(uint64_t, void *, uint64_t, void *, size_t);
	int (*htod_async)(uint64_t, const void *, size_t, void *);
	int (*mod_load)(void **, const void *);
	int (*mod_unload)(void *);
	int (*mod_fn)(void **, void *, const char *);
	int (*fn_attr)(int *, int, void *);
	int (*stream_create)(void **, unsigned int);
	int (*stream_destroy)(void *);
	int (*stream_sync)(void *);
	int (*stream_query)(void *);
	int (*launch)(void *, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, void *, void **, void **);
	// Optional: a driver without them still works, with terser errors.
	int (*err_string)(int, const char **);
	int (*err_name)(int, const char **);
} cu;

// cu_why says why cu_load failed; written once, under Go's sync.Once.
static char cu_why[512];

// cu_load opens the driver and resolves every entry point: 0 when done,
// else -1 with cu_why set.
static int cu_load(void) {
	void *l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!l) {
		const char *e = dlerror();
		snprintf(cu_why, sizeof cu_why, "dlopen libcuda.so.1: %s", e ? e : "failed");
		return -1;
	}
#define SYM(f, name) \
	if (!(*(void **)&cu.f = dlsym(l, name))) { \
		snprintf(cu_why, sizeof cu_why, "libcuda.so.1 lacks %s", name); \
		return -1; \
	}
	SYM(init, "cuInit")
	SYM(dev_count, "cuDeviceGetCount")
	SYM(dev_get, "cuDeviceGet")
	SYM(can_peer, "cuDeviceCanAccessPeer")
	SYM(ctx_retain, "cuDevicePrimaryCtxRetain")
	SYM(ctx_release, "cuDevicePrimaryCtxRelease_v2")
	SYM(ctx_set, "cuCtxSetCurrent")
	SYM(ctx_sync, "cuCtxSynchronize")
	SYM(ctx_enable_peer, "cuCtxEnablePeerAccess")
	SYM(mem_alloc, "cuMemAlloc_v2")
	SYM(mem_free, "cuMemFree_v2")
	SYM(mem_alloc_host, "cuMemAllocHost_v2")
	SYM(mem_free_host, "cuMemFreeHost")
	SYM(htod, "cuMemcpyHtoD_v2")
	SYM(dtoh, "cuMemcpyDtoH_v2")
	SYM(dtod, "cuMemcpyDtoD_v2")
	SYM(memset8, "cuMemsetD8_v2")
	SYM(peer, "cuMemcpyPeer")
	SYM(htod_async, "cuMemcpyHtoDAsync_v2")
	SYM(mod_load, "cuModuleLoadData")
	SYM(mod_unload, "cuModuleUnload")
	SYM(mod_fn, "cuModuleGetFunction")
	SYM(fn_attr, "cuFuncGetAttribute")
	SYM(stream_create, "cuStreamCreate")
	SYM(stream_destroy, "cuStreamDestroy_v2")
	SYM(stream_sync, "cuStreamSynchronize")
	SYM(stream_query, "cuStreamQuery")
	SYM(launch, "cuLaunchKernel")
#undef SYM
	*(void **)&cu.err_string = dlsym(l, "cuGetErrorString");
	*(void **)&cu.err_name = dlsym(l, "cuGetErrorName");
	return 0;
}

static const char *cu_load_error(void) { return cu_why; }
static int cu_init(void) { return cu.init(0); }
static const char *cu_err_string(int r) {
	const char *s = 0;
	if (cu.err_string && cu.err_string(r, &s) != 0) s = 0;
	return s;
}
static const char *cu_err_name(int r) {
	const char *s = 0;
	if (cu.err_name && cu.err_name(r, &s) != 0) s = 0;
	return s;
}

static int cu_dev_count(int *n) { return cu.dev_count(n); }
static int cu_can_peer(int *can, int a, int b) {
	int da, db;
	int r = cu.dev_get(&da, a);
	if (r) return r;
	if ((r = cu.dev_get(&db, b))) return r;
	return cu.can_peer(can, da, db);
}
static int cu_ctx_retain(uintptr_t *ctx, int *dev, int ordinal) {
	void *c = 0;
	int r = cu.dev_get(dev, ordinal);
	if (r) return r;
	r = cu.ctx_retain(&c, *dev);
	*ctx = (uintptr_t)c;
	return r;
}
static int cu_ctx_release(int dev) { return cu.ctx_release(dev); }
static int cu_ctx_set(uintptr_t c) { return cu.ctx_set((void *)c); }
static int cu_ctx_sync(void) { return cu.ctx_sync(); }
static int cu_ctx_enable_peer(uintptr_t peer) { return cu.ctx_enable_peer((void *)peer, 0); }

static int cu_mem_alloc(uint64_t *p, size_t n) { return cu.mem_alloc(p, n); }
static int cu_mem_free(uint64_t p) { return cu.mem_free(p); }
static int cu_mem_alloc_host(void **p, size_t n) { return cu.mem_alloc_host(p, n); }
static int cu_mem_free_host(void *p) { return cu.mem_free_host(p); }
static int cu_htod(uint64_t d, const void *s, size_t n) { return cu.htod(d, s, n); }
static int cu_dtoh(void *d, uint64_t s, size_t n) { return cu.dtoh(d, s, n); }
static int cu_dtod(uint64_t d, uint64_t s, size_t n) { return cu.dtod(d, s, n); }
static int cu_memset8(uint64_t d, unsigned char v, size_t n) { return cu.memset8(d, v, n); }
static int cu_peer(uint64_t d, uintptr_t dc, uint64_t s, uintptr_t sc, size_t n) {
	return cu.peer(d, (void *)dc, s, (void *)sc, n);
}
static int cu_htod_async(uint64_t d, const void *s, size_t n, uintptr_t st) {
	return cu.htod_async(d, s, n, (void *)st);
}

static int cu_mod_load(uintptr_t *m, const char *image) {
	void *h = 0;
	int r = cu.mod_load(&h, image);
	*m = (uintptr_t)h;
	return r;
}
static int cu_mod_unload(uintptr_t m) { return cu.mod_unload((void *)m); }
static int cu_mod_fn(uintptr_t *f, uintptr_t m, const char *name) {
	void *h = 0;
	int r = cu.mod_fn(&h, (void *)m, name);
	*f = (uintptr_t)h;
	return r;
}
static int cu_fn_attr(int *v, int attr, uintptr_t f) { return cu.fn_attr(v, attr, (void *)f); }

static int cu_stream_create(uintptr_t *s, unsigned int flags) {
	void *h = 0;
	int r = cu.stream_create(&h, flags);
	*s = (uintptr_t)h;
	return r;
}
static int cu_stream_destroy(uintptr_t s) { return cu.stream_destroy((void *)s); }
static int cu_stream_sync(uintptr_t s) { return cu.stream_sync((void *)s); }
static int cu_stream_query(uintptr_t s) { return cu.stream_query((void *)s); }

#define CU_MAX_ARGS 32

// cu_launch launches f over grid x 1 x 1 blocks of block x 1 x 1 threads.
// The parameters are n 8-byte slots, each holding one value at its start:
// they are copied here, so the kernel's parameter pointers point at C
// memory, and the driver copies the values before cuLaunchKernel returns.
static int cu_launch(uintptr_t f, unsigned int grid, unsigned int block, unsigned int shared,
		uintptr_t s, const uint64_t *slots, int n) {
	uint64_t vals[CU_MAX_ARGS];
	void *args[CU_MAX_ARGS];
	if (n < 0 || n > CU_MAX_ARGS) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < n; i++) {
		vals[i] = slots[i];
		args[i] = &vals[i];
	}
	return cu.launch((void *)f, grid, 1, 1, block, 1, 1, shared, (void *)s, n ? args : 0, 0);
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

func drvLoad() error {
	if C.cu_load() != 0 {
		return errors.New(C.GoString(C.cu_load_error()))
	}
	return nil
}

func drvInit() Result { return Result(C.cu_init()) }

func drvErrorString(r Result) string {
	if s := C.cu_err_string(C.int(r)); s != nil {
		return C.GoString(s)
	}
	return ""
}

func drvErrorName(r Result) string {
	if s := C.cu_err_name(C.int(r)); s != nil {
		return C.GoString(s)
	}
	return ""
}

func drvDeviceCount() (int, Result) {
	var n C.int
	r := C.cu_dev_count(&n)
	return int(n), Result(r)
}

func drvCanAccessPeer(a, b int) (bool, Result) {
	var can C.int
	r := C.cu_can_peer(&can, C.int(a), C.int(b))
	return can != 0, Result(r)
}

func drvCtxRetain(ordinal int) (uintptr, int32, Result) {
	var h C.uintptr_t
	var dev C.int
	r := C.cu_ctx_retain(&h, &dev, C.int(ordinal))
	return uintptr(h), int32(dev), Result(r)
}

func drvCtxRelease(dev int32) Result    { return Result(C.cu_ctx_release(C.int(dev))) }
func drvCtxSet(h uintptr) Result        { return Result(C.cu_ctx_set(C.uintptr_t(h))) }
func drvCtxSync() Result                { return Result(C.cu_ctx_sync()) }
func drvCtxEnablePeer(h uintptr) Result { return Result(C.cu_ctx_enable_peer(C.uintptr_t(h))) }

func drvMemAlloc(n uint64) (uint64, Result) {
	var p C.uint64_t
	r := C.cu_mem_alloc(&p, C.size_t(n))
	return uint64(p), Result(r)
}

func drvMemFree(p uint64) Result { return Result(C.cu_mem_free(C.uint64_t(p))) }

func drvMemAllocHost(n int) (unsafe.Pointer, Result) {
	var p unsafe.Pointer
	r := C.cu_mem_alloc_host(&p, C.size_t(n))
	return p, Result(r)
}

func drvMemFreeHost(p unsafe.Pointer) Result { return Result(C.cu_mem_free_host(p)) }

func drvMemcpyHtoD(dst uint64, src unsafe.Pointer, n int) Result {
	return Result(C.cu_htod(C.uint64_t(dst), src, C.size_t(n)))
}

func drvMemcpyDtoH(dst unsafe.Pointer, src uint64, n int) Result {
	return Result(C.cu_dtoh(dst, C.uint64_t(src), C.size_t(n)))
}

func drvMemcpyDtoD(dst, src, n uint64) Result {
	return Result(C.cu_dtod(C.uint64_t(dst), C.uint64_t(src), C.size_t(n)))
}

func drvMemsetD8(p uint64, v byte, n uint64) Result {
	return Result(C.cu_memset8(C.uint64_t(p), C.uchar(v), C.size_t(n)))
}

func drvMemcpyPeer(dst uint64, dctx uintptr, src uint64, sctx uintptr, n uint64) Result {
	return Result(C.cu_peer(C.uint64_t(dst), C.uintptr_t(dctx), C.uint64_t(src), C.uintptr_t(sctx), C.size_t(n)))
}

// drvMemcpyHtoDAsync takes src from HostMem only: C memory, since the
// driver reads it after the call.
func drvMemcpyHtoDAsync(dst uint64, src unsafe.Pointer, n int, s uintptr) Result {
	return Result(C.cu_htod_async(C.uint64_t(dst), src, C.size_t(n), C.uintptr_t(s)))
}

func drvModuleLoadData(image string) (uintptr, Result) {
	img := C.CString(image)
	defer C.free(unsafe.Pointer(img))
	var h C.uintptr_t
	r := C.cu_mod_load(&h, img)
	return uintptr(h), Result(r)
}

func drvModuleUnload(m uintptr) Result { return Result(C.cu_mod_unload(C.uintptr_t(m))) }

func drvModuleGetFunction(m uintptr, name string) (uintptr, Result) {
	n := C.CString(name)
	defer C.free(unsafe.Pointer(n))
	var h C.uintptr_t
	r := C.cu_mod_fn(&h, C.uintptr_t(m), n)
	return uintptr(h), Result(r)
}

func drvFuncGetAttribute(f uintptr, attr int) (int, Result) {
	var v C.int
	r := C.cu_fn_attr(&v, C.int(attr), C.uintptr_t(f))
	return int(v), Result(r)
}

func drvStreamCreate(flags uint32) (uintptr, Result) {
	var h C.uintptr_t
	r := C.cu_stream_create(&h, C.uint(flags))
	return uintptr(h), Result(r)
}

func drvStreamDestroy(s uintptr) Result     { return Result(C.cu_stream_destroy(C.uintptr_t(s))) }
func drvStreamSynchronize(s uintptr) Result { return Result(C.cu_stream_sync(C.uintptr_t(s))) }
func drvStreamQuery(s uintptr) Result       { return Result(C.cu_stream_query(C.uintptr_t(s))) }

// drvLaunchKernel passes the slots, Go memory without Go pointers, for the
// call only: cu_launch copies them.
func drvLaunchKernel(f uintptr, grid, block, shared uint32, s uintptr, slots []uint64) Result {
	var p *C.uint64_t
	if len(slots) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&slots[0]))
	}
	return Result(C.cu_launch(C.uintptr_t(f), C.uint(grid), C.uint(block), C.uint(shared), C.uintptr_t(s), p, C.int(len(slots))))
}
