//go:build cuda

package gpucopy

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

// Our own prototypes for the driver entry points used (the CUDA driver
// ABI: CUresult is int, CUdeviceptr 64-bit, handles are pointers).
typedef int (*f_init)(unsigned int);
typedef int (*f_dev_get)(int*, int);
typedef int (*f_retain)(void**, int);
typedef int (*f_release)(int);
typedef int (*f_set)(void*);
typedef int (*f_mod_load)(void**, const void*);
typedef int (*f_mod_unload)(void*);
typedef int (*f_mod_fn)(void**, void*, const char*);
typedef int (*f_stream_create)(void**, unsigned int);
typedef int (*f_stream_destroy)(void*);
typedef int (*f_stream_sync)(void*);
typedef int (*f_alloc)(uint64_t*, size_t);
typedef int (*f_free)(uint64_t);
typedef int (*f_alloc_host)(void**, size_t);
typedef int (*f_free_host)(void*);
typedef int (*f_htod_async)(uint64_t, const void*, size_t, void*);
typedef int (*f_launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
typedef int (*f_errstr)(int, const char**);
typedef int (*f_attr)(int*, int, void*);
typedef int (*f_stream_query)(void*);

static struct {
	void *lib;
	f_init init; f_dev_get dev_get; f_retain retain; f_release release; f_set set;
	f_mod_load mod_load; f_mod_unload mod_unload; f_mod_fn mod_fn;
	f_stream_create stream_create; f_stream_destroy stream_destroy; f_stream_sync stream_sync;
	f_alloc alloc; f_free free_; f_alloc_host alloc_host; f_free_host free_host;
	f_htod_async htod_async; f_launch launch; f_errstr errstr; f_attr attr; f_stream_query stream_query;
} gc;

static int gc_load(void) {
	if (gc.lib) return 0;
	void *l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!l) return -1;
#define SYM(f, name) if (!(gc.f = (void*)dlsym(l, name))) return -2;
	SYM(init, "cuInit") SYM(dev_get, "cuDeviceGet")
	SYM(retain, "cuDevicePrimaryCtxRetain") SYM(release, "cuDevicePrimaryCtxRelease_v2")
	SYM(set, "cuCtxSetCurrent")
	SYM(mod_load, "cuModuleLoadData") SYM(mod_unload, "cuModuleUnload") SYM(mod_fn, "cuModuleGetFunction")
	SYM(stream_create, "cuStreamCreate") SYM(stream_destroy, "cuStreamDestroy_v2") SYM(stream_sync, "cuStreamSynchronize")
	SYM(alloc, "cuMemAlloc_v2") SYM(free_, "cuMemFree_v2")
	SYM(alloc_host, "cuMemAllocHost_v2") SYM(free_host, "cuMemFreeHost")
	SYM(htod_async, "cuMemcpyHtoDAsync_v2") SYM(launch, "cuLaunchKernel") SYM(errstr, "cuGetErrorString")
	SYM(attr, "cuFuncGetAttribute") SYM(stream_query, "cuStreamQuery")
#undef SYM
	gc.lib = l;
	return gc.init(0);
}

static const char *gc_errstr(int r) { const char *s = 0; if (gc.errstr) gc.errstr(r, &s); return s ? s : "unknown CUDA error"; }

static int gc_open(int ord, void **ctx) {
	int dev; int r = gc.dev_get(&dev, ord); if (r) return r;
	return gc.retain(ctx, dev);
}
static int gc_close_ctx(int ord) { int dev; int r = gc.dev_get(&dev, ord); if (r) return r; return gc.release(dev); }
static int gc_set(void *ctx) { return gc.set(ctx); }
static int gc_module(const char *ptx, void **mod, void **fn, void **fnBlocks) {
	int r = gc.mod_load(mod, ptx); if (r) return r;
	r = gc.mod_fn(fn, *mod, "gonixl_copy_segments"); if (r) return r;
	// The block kernel is optional: an older PTX has only the segment one.
	if (gc.mod_fn(fnBlocks, *mod, "gonixl_copy_blocks")) *fnBlocks = 0;
	return 0;
}
static int gc_mod_unload(void *mod) { return gc.mod_unload(mod); }
// CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0: the kernel's launch bounds.
static int gc_max_threads(void *fn, int *n) { return gc.attr(n, 0, fn); }
// CU_STREAM_NON_BLOCKING = 1: the copier's stream does not wait for the legacy default stream.
static int gc_stream(void **s) { return gc.stream_create(s, 1); }
static int gc_stream_destroy(void *s) { return gc.stream_destroy(s); }
static int gc_alloc(uint64_t *p, size_t n) { return gc.alloc(p, n); }
static int gc_free(uint64_t p) { return gc.free_(p); }
static int gc_alloc_host(void **p, size_t n) { return gc.alloc_host(p, n); }
static int gc_free_host(void *p) { return gc.free_host(p); }

// gc_run_blocks uploads the bases and block ids (bytes of the pinned host
// table: regions 64-bit bases, then m 32-bit ids) and launches the block
// kernel over regions*m items on stream s, and waits for it when sync.
static int gc_run_blocks(void *fn, void *s, uint64_t dtable, const void *htable, size_t bytes,
		unsigned int regions, unsigned int m, uint64_t blockLen, uint64_t off, uint64_t len,
		uint64_t slot, uint64_t slotStride, int toSlot, unsigned int grid, unsigned int threads, int sync) {
	int r = gc.htod_async(dtable, htable, bytes, s); if (r) return r;
	uint64_t bases = dtable, blocks = dtable + 8ull * regions;
	void *args[10] = {&bases, &blocks, &regions, &m, &blockLen, &off, &len, &slot, &slotStride, &toSlot};
	r = gc.launch(fn, grid, 1, 1, threads, 1, 1, 0, s, args, 0); if (r) return r;
	return sync ? gc.stream_sync(s) : 0;
}

// gc_query is cuStreamQuery: 0 once the stream's work is done,
// CUDA_ERROR_NOT_READY (600) while it runs, else the error.
static int gc_query(void *s) { return gc.stream_query(s); }

// gc_run uploads n segment records from the pinned host table, launches the
// kernel over them on stream s and waits for it when sync.
static int gc_run(void *fn, void *s, uint64_t dtable, const void *htable, unsigned int n, unsigned int grid, unsigned int threads, int sync) {
	int r = gc.htod_async(dtable, htable, (size_t)n * 24, s); if (r) return r;
	void *args[2]; args[0] = &dtable; args[1] = &n;
	r = gc.launch(fn, grid, 1, 1, threads, 1, 1, 0, s, args, 0); if (r) return r;
	return sync ? gc.stream_sync(s) : 0;
}
*/
import "C"

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/gonixl/gonixl/internal/staging"
)

//go:embed segcopy.ptx
var ptx string

var (
	loadOnce sync.Once
	loadErr  error
)

func load() error {
	loadOnce.Do(func() {
		switch r := C.gc_load(); r {
		case 0:
		case -1:
			loadErr = fmt.Errorf("%w: dlopen libcuda.so.1 failed", ErrUnavailable)
		case -2:
			loadErr = fmt.Errorf("%w: libcuda.so.1 lacks a driver entry point", ErrUnavailable)
		default:
			loadErr = fmt.Errorf("%w: cuInit: %s", ErrUnavailable, C.GoString(C.gc_errstr(r)))
		}
	})
	return loadErr
}

func check(op string, r C.int) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("gpucopy: %s: CUDA error %d: %s", op, int(r), C.GoString(C.gc_errstr(r)))
}

// maxGrid bounds the thread blocks of one launch; the kernel strides over
// longer lists.
const maxGrid = 1 << 20

// segBytes is the size of one segment record (three 64-bit words).
const segBytes = 24

// pieceBytes is the longest piece one thread block copies: longer segments
// are cut, so that a few large runs still use every multiprocessor.
const pieceBytes = 64 << 10

// PTXEnv names a PTX file that New loads instead of the embedded one, to
// try a change of segcopy.cu without rebuilding.
const PTXEnv = "GONIXL_GPUCOPY_PTX"

// Copier runs the gather/scatter kernel on one GPU, on its own stream. It
// is safe for concurrent use: copies run one at a time.
type Copier struct {
	mu       sync.Mutex
	ordinal  int
	ctx      unsafe.Pointer // CUcontext
	mod, fn  unsafe.Pointer // CUmodule, CUfunction
	fnBlocks unsafe.Pointer // the block kernel; nil when the PTX has none
	stream   unsafe.Pointer // CUstream
	host     unsafe.Pointer // pinned segment table (C memory)
	dev      C.uint64_t     // device segment table
	cap      int            // records both tables hold
	threads  int            // threads per block: the kernel's launch bounds
	closed   bool
	broken   bool // a kernel outlived KernelTimeout
}

// KernelTimeout bounds how long a copy with progress waits for its kernel
// (a gather of gigabytes takes milliseconds).
const KernelTimeout = 30 * time.Second

// New loads the kernel on device ordinal (the DevID of its VRAM
// descriptors) and creates the copier's stream. The kernel is the
// embedded PTX, or the file PTXEnv names when set.
func New(device int) (*Copier, error) {
	if path := os.Getenv(PTXEnv); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("gpucopy: %s: %w", PTXEnv, err)
		}
		return NewWithPTX(device, string(b))
	}
	return NewWithPTX(device, ptx)
}

// NewWithPTX is New with the kernel's PTX given (for trying variants).
func NewWithPTX(device int, ptx string) (*Copier, error) {
	if err := load(); err != nil {
		return nil, err
	}
	c := &Copier{ordinal: device}
	if err := check("cuDevicePrimaryCtxRetain", C.gc_open(C.int(device), &c.ctx)); err != nil {
		return nil, err
	}
	err := c.do(func() error {
		img := C.CString(ptx)
		defer C.free(unsafe.Pointer(img))
		if err := check("cuModuleLoadData", C.gc_module(img, &c.mod, &c.fn, &c.fnBlocks)); err != nil {
			return err
		}
		var n C.int
		if err := check("cuFuncGetAttribute", C.gc_max_threads(c.fn, &n)); err != nil {
			return err
		}
		c.threads = min(int(n), 1024)
		return check("cuStreamCreate", C.gc_stream(&c.stream))
	})
	if err != nil {
		_ = c.release()
		return nil, err
	}
	return c, nil
}

// run runs one copy f: one at a time, with the context current, refused
// once the copier is closed or a kernel outlived KernelTimeout.
func (c *Copier) run(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("gpucopy: copier closed")
	}
	if c.broken {
		return errors.New("gpucopy: copier unusable: a kernel outlived its timeout")
	}
	return c.do(f)
}

// do runs f with the copier's context current on a locked OS thread.
func (c *Copier) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuCtxSetCurrent", C.gc_set(c.ctx)); err != nil {
		return err
	}
	return f()
}

// grow makes the tables hold n records.
func (c *Copier) grow(n int) error {
	if n <= c.cap {
		return nil
	}
	want := max(n, 2*c.cap, 1024)
	if c.host != nil {
		_ = check("cuMemFreeHost", C.gc_free_host(c.host))
		c.host = nil
	}
	if c.dev != 0 {
		_ = check("cuMemFree", C.gc_free(c.dev))
		c.dev = 0
	}
	c.cap = 0
	if err := check("cuMemAllocHost", C.gc_alloc_host(&c.host, C.size_t(want*segBytes))); err != nil {
		return err
	}
	if err := check("cuMemAlloc", C.gc_alloc(&c.dev, C.size_t(want*segBytes))); err != nil {
		return err
	}
	c.cap = want
	return nil
}

// Copy copies every segment (device addresses of this GPU) and returns
// once the kernel has finished. Segments must not overlap one another.
func (c *Copier) Copy(segs []staging.Seg) error { return c.CopyProgress(segs, nil) }

// CopyProgress is Copy calling progress (when not nil) over and over
// while the kernel runs, with no lock of the caller's held by the copier
// but its own: the caller's transfers keep moving during a long gather.
func (c *Copier) CopyProgress(segs []staging.Seg, progress func()) error {
	if len(segs) == 0 {
		return nil
	}
	n := 0
	for _, s := range segs {
		n += int((s.Len + pieceBytes - 1) / pieceBytes)
	}
	if n > 1<<31 {
		return fmt.Errorf("gpucopy: %d pieces in one copy, at most %d", n, 1<<31)
	}
	return c.run(func() error {
		if err := c.grow(n); err != nil {
			return err
		}
		// The table is C memory: Go writes the records, C only reads them.
		tab := unsafe.Slice((*uint64)(c.host), 3*n)
		i := 0
		for _, s := range segs {
			for off := uint64(0); off < s.Len; off += pieceBytes {
				tab[3*i], tab[3*i+1], tab[3*i+2] = s.Src+off, s.Dst+off, min(pieceBytes, s.Len-off)
				i++
			}
		}
		grid := min(i, maxGrid)
		if i == 0 {
			return nil
		}
		if err := check("kernel gonixl_copy_segments", C.gc_run(c.fn, c.stream, c.dev, c.host, C.uint(i), C.uint(grid), C.uint(c.threads), syncFlag(progress))); err != nil {
			return err
		}
		return c.wait("kernel gonixl_copy_segments", progress)
	})
}

func syncFlag(progress func()) C.int {
	if progress == nil {
		return 1
	}
	return 0
}

// wait polls the stream until its kernel ended, calling progress between
// polls; with no progress the launch already waited. The context is made
// current again after each call, which may run other CUDA users' code.
func (c *Copier) wait(op string, progress func()) error {
	if progress == nil {
		return nil
	}
	deadline := time.Now().Add(KernelTimeout)
	for {
		switch r := C.gc_query(c.stream); r {
		case 0:
			return nil
		case 600: // CUDA_ERROR_NOT_READY
		default:
			return check(op, r)
		}
		if time.Now().After(deadline) {
			// The kernel may still write: nothing may use the copier (or
			// hand its memory to another copy) again.
			c.broken = true
			return fmt.Errorf("gpucopy: %s still running after %v; the copier is unusable", op, KernelTimeout)
		}
		progress()
		if err := check("cuCtxSetCurrent", C.gc_set(c.ctx)); err != nil {
			return err
		}
	}
}

// CopyBlocks copies by block ids (see staging.BlockCopy) with the block
// kernel, which computes the addresses on the GPU: only the bases and ids
// are uploaded. Without that kernel in the PTX it copies the same bytes
// by segments.
func (c *Copier) CopyBlocks(b staging.BlockCopy) error { return c.CopyBlocksProgress(b, nil) }

// CopyBlocksProgress is CopyBlocks calling progress as CopyProgress does.
func (c *Copier) CopyBlocksProgress(b staging.BlockCopy, progress func()) error {
	items := uint64(len(b.Bases)) * uint64(len(b.Blocks))
	if items == 0 || b.Len == 0 {
		return nil
	}
	if c.fnBlocks == nil || len(b.Bases) > 1<<20 || len(b.Blocks) > 1<<30 || items > 1<<40 {
		return c.CopyProgress(b.Segs(nil), progress)
	}
	for _, id := range b.Blocks {
		if id < 0 || id > 1<<31-1 {
			return fmt.Errorf("gpucopy: block id %d out of range", id)
		}
	}
	toSlot := 0
	if b.ToSlot {
		toSlot = 1
	}
	// Table: the bases (8 bytes each), then the ids (4 bytes each), in
	// records of 24 bytes as grow counts them.
	bytes := 8*len(b.Bases) + 4*len(b.Blocks)
	return c.run(func() error {
		if err := c.grow((bytes + segBytes - 1) / segBytes); err != nil {
			return err
		}
		bases := unsafe.Slice((*uint64)(c.host), len(b.Bases))
		copy(bases, b.Bases)
		ids := unsafe.Slice((*int32)(unsafe.Add(c.host, 8*len(b.Bases))), len(b.Blocks))
		for i, id := range b.Blocks {
			ids[i] = int32(id)
		}
		grid := int(min(items, maxGrid))
		if err := check("kernel gonixl_copy_blocks", C.gc_run_blocks(c.fnBlocks, c.stream, c.dev, c.host, C.size_t(bytes),
			C.uint(len(b.Bases)), C.uint(len(b.Blocks)), C.uint64_t(b.BlockLen), C.uint64_t(b.Off), C.uint64_t(b.Len),
			C.uint64_t(b.Slot), C.uint64_t(b.SlotStride), C.int(toSlot), C.uint(grid), C.uint(c.threads), syncFlag(progress))); err != nil {
			return err
		}
		return c.wait("kernel gonixl_copy_blocks", progress)
	})
}

// HasBlockKernel reports whether the loaded PTX has the block kernel.
func (c *Copier) HasBlockKernel() bool { return c.fnBlocks != nil }

// Close frees the copier's stream, tables and module and releases the
// context. It is idempotent; Copy after Close returns an error.
func (c *Copier) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.release()
}

func (c *Copier) release() error {
	var errs []error
	_ = c.do(func() error {
		if c.stream != nil {
			errs = append(errs, check("cuStreamDestroy", C.gc_stream_destroy(c.stream)))
		}
		if c.host != nil {
			errs = append(errs, check("cuMemFreeHost", C.gc_free_host(c.host)))
		}
		if c.dev != 0 {
			errs = append(errs, check("cuMemFree", C.gc_free(c.dev)))
		}
		if c.mod != nil {
			errs = append(errs, check("cuModuleUnload", C.gc_mod_unload(c.mod)))
		}
		return nil
	})
	errs = append(errs, check("cuDevicePrimaryCtxRelease", C.gc_close_ctx(C.int(c.ordinal))))
	return errors.Join(errs...)
}

// EmbeddedPTX returns the kernel's PTX that New loads by default.
func EmbeddedPTX() string { return ptx }
