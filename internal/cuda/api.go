package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

var (
	loadOnce sync.Once
	loadErr  error
	// symbols is set once every entry point is resolved (before cuInit),
	// so that Result.Error may ask the driver for names and descriptions.
	symbols atomic.Bool
)

// Init loads libcuda.so.1, resolves the driver entry points and runs
// cuInit, once per process; later calls return the first call's result.
// Every function below that reaches the driver calls it first. Its error
// matches ErrUnavailable.
func Init() error {
	loadOnce.Do(func() {
		if err := drvLoad(); err != nil {
			loadErr = fmt.Errorf("%w: %w", ErrUnavailable, err)
			return
		}
		symbols.Store(true)
		if err := check("cuInit", drvInit()); err != nil {
			loadErr = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	})
	return loadErr
}

// DeviceCount returns the number of CUDA devices (cuDeviceGetCount).
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	n, r := drvDeviceCount()
	return n, check("cuDeviceGetCount", r)
}

// CanAccessPeer reports whether device ordinal a can address device b's
// memory directly (cuDeviceCanAccessPeer: NVLink or PCIe peer to peer).
func CanAccessPeer(a, b int) (bool, error) {
	if err := Init(); err != nil {
		return false, err
	}
	can, r := drvCanAccessPeer(a, b)
	return can, check("cuDeviceCanAccessPeer", r)
}

// Context is the primary context of one device, retained by
// RetainPrimary. Its methods are not safe for use concurrent with Release.
type Context struct {
	ordinal int
	dev     int32   // CUdevice
	h       uintptr // CUcontext, a driver handle; 0 once released
}

var errReleased = errors.New("cuda: context released")

// RetainPrimary retains the primary context of device ordinal
// (cuDeviceGet, cuDevicePrimaryCtxRetain).
func RetainPrimary(ordinal int) (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	h, dev, r := drvCtxRetain(ordinal)
	if err := check("cuDevicePrimaryCtxRetain", r); err != nil {
		return nil, err
	}
	return &Context{ordinal: ordinal, dev: dev, h: h}, nil
}

// Ordinal returns the device ordinal the context was retained for.
func (c *Context) Ordinal() int { return c.ordinal }

// SetCurrent makes the context current on the calling OS thread
// (cuCtxSetCurrent) and leaves it so; callers that want it on a known
// thread lock the goroutine to its thread first, or use Do.
func (c *Context) SetCurrent() error {
	if c.h == 0 {
		return errReleased
	}
	return check("cuCtxSetCurrent", drvCtxSet(c.h))
}

// Do runs f with the goroutine locked to its OS thread and the context
// current there: the context binding is per thread, so the driver calls f
// makes act on this context.
func (c *Context) Do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.SetCurrent(); err != nil {
		return err
	}
	return f()
}

// EnablePeerAccess lets work issued in c address peer's memory directly
// (cuCtxEnablePeerAccess, with c current). Enabling it twice is an error
// matching ErrorPeerAccessAlreadyEnabled.
func (c *Context) EnablePeerAccess(peer *Context) error {
	if peer.h == 0 {
		return errReleased
	}
	return c.Do(func() error { return check("cuCtxEnablePeerAccess", drvCtxEnablePeer(peer.h)) })
}

// Release releases the primary context (cuDevicePrimaryCtxRelease). It is
// idempotent.
func (c *Context) Release() error {
	if c.h == 0 {
		return nil
	}
	c.h = 0
	return check("cuDevicePrimaryCtxRelease", drvCtxRelease(c.dev))
}

// CtxSynchronize waits for all work of the current context
// (cuCtxSynchronize).
func CtxSynchronize() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuCtxSynchronize", drvCtxSync())
}

// MemAlloc allocates n bytes of device memory in the current context and
// returns its device address (cuMemAlloc).
func MemAlloc(n uint64) (uint64, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	p, r := drvMemAlloc(n)
	return p, check("cuMemAlloc", r)
}

// MemFree frees device memory of MemAlloc (cuMemFree).
func MemFree(p uint64) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemFree", drvMemFree(p))
}

// MemcpyHtoD copies src to device address dst (cuMemcpyHtoD). The driver
// has read src when it returns.
func MemcpyHtoD(dst uint64, src []byte) error {
	if err := Init(); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoD", drvMemcpyHtoD(dst, unsafe.Pointer(&src[0]), len(src)))
}

// MemcpyDtoH copies len(dst) bytes from device address src and returns
// once they are in dst (cuMemcpyDtoH).
func MemcpyDtoH(dst []byte, src uint64) error {
	if err := Init(); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoH", drvMemcpyDtoH(unsafe.Pointer(&dst[0]), src, len(dst)))
}

// MemcpyDtoD copies n bytes between device addresses (cuMemcpyDtoD); it
// may return before the copy ends: CtxSynchronize waits for it.
func MemcpyDtoD(dst, src, n uint64) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemcpyDtoD", drvMemcpyDtoD(dst, src, n))
}

// MemsetD8 sets n bytes at device address p to v (cuMemsetD8); it may
// return before they are set: CtxSynchronize waits for it.
func MemsetD8(p uint64, v byte, n uint64) error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuMemsetD8", drvMemsetD8(p, v, n))
}

// MemcpyPeer copies n bytes from src in srcCtx to dst in dstCtx
// (cuMemcpyPeer); it may return before the copy ends.
func MemcpyPeer(dst uint64, dstCtx *Context, src uint64, srcCtx *Context, n uint64) error {
	if err := Init(); err != nil {
		return err
	}
	if dstCtx.h == 0 || srcCtx.h == 0 {
		return errReleased
	}
	return check("cuMemcpyPeer", drvMemcpyPeer(dst, dstCtx.h, src, srcCtx.h, n))
}

// HostMem is page-locked host memory of MemAllocHost: C memory, which Go
// code reads and writes through Ptr and the driver may read after a call
// returns (MemcpyHtoDAsync).
type HostMem struct {
	p unsafe.Pointer
	n int
}

// MemAllocHost allocates n bytes of page-locked host memory in the current
// context (cuMemAllocHost).
func MemAllocHost(n int) (*HostMem, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, &Error{Op: "cuMemAllocHost", Result: ErrorInvalidValue}
	}
	p, r := drvMemAllocHost(n)
	if err := check("cuMemAllocHost", r); err != nil {
		return nil, err
	}
	return &HostMem{p: p, n: n}, nil
}

// Ptr returns the memory's address; nil once freed.
func (h *HostMem) Ptr() unsafe.Pointer { return h.p }

// Len returns the memory's size in bytes; 0 once freed.
func (h *HostMem) Len() int { return h.n }

// Free frees the memory (cuMemFreeHost), with its context current. It is
// idempotent.
func (h *HostMem) Free() error {
	if h.p == nil {
		return nil
	}
	p := h.p
	h.p, h.n = nil, 0
	return check("cuMemFreeHost", drvMemFreeHost(p))
}

// MemcpyHtoDAsync queues a copy of the first n bytes of src to device
// address dst on stream s (cuMemcpyHtoDAsync). The driver reads src after
// the call returns, hence pinned memory of MemAllocHost and never Go's.
func MemcpyHtoDAsync(dst uint64, src *HostMem, n int, s Stream) error {
	if err := Init(); err != nil {
		return err
	}
	if src.p == nil || n < 0 || n > src.n {
		return &Error{Op: "cuMemcpyHtoDAsync", Result: ErrorInvalidValue}
	}
	return check("cuMemcpyHtoDAsync", drvMemcpyHtoDAsync(dst, src.p, n, s.h))
}

// Module is a loaded module (CUmodule); the zero Module is none.
type Module struct{ h uintptr }

// ModuleLoadData loads a module from image (PTX text, or a cubin or
// fatbin) into the current context (cuModuleLoadData).
func ModuleLoadData(image string) (Module, error) {
	if err := Init(); err != nil {
		return Module{}, err
	}
	h, r := drvModuleLoadData(image)
	return Module{h: h}, check("cuModuleLoadData", r)
}

// Function returns the module's kernel called name (cuModuleGetFunction);
// a name the module lacks is an error matching ErrorNotFound.
func (m Module) Function(name string) (Function, error) {
	if err := Init(); err != nil {
		return Function{}, err
	}
	h, r := drvModuleGetFunction(m.h, name)
	if err := check("cuModuleGetFunction "+name, r); err != nil {
		return Function{}, err
	}
	return Function{h: h}, nil
}

// Unload unloads the module (cuModuleUnload), with its context current.
func (m Module) Unload() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuModuleUnload", drvModuleUnload(m.h))
}

// IsZero reports whether m is the zero Module.
func (m Module) IsZero() bool { return m.h == 0 }

// Function is a kernel of a loaded module (CUfunction); the zero Function
// is none.
type Function struct{ h uintptr }

// IsZero reports whether f is the zero Function.
func (f Function) IsZero() bool { return f.h == 0 }

// FuncAttribute is a CUfunction_attribute.
type FuncAttribute int

// FuncAttributeMaxThreadsPerBlock is CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
// the most threads a block of the kernel may have (its launch bounds).
const FuncAttributeMaxThreadsPerBlock FuncAttribute = 0

// Attribute returns an attribute of the kernel (cuFuncGetAttribute).
func (f Function) Attribute(a FuncAttribute) (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	v, r := drvFuncGetAttribute(f.h, int(a))
	return v, check("cuFuncGetAttribute", r)
}

// Stream is a stream (CUstream); the zero Stream is the default stream of
// the current context.
type Stream struct{ h uintptr }

// IsZero reports whether s is the zero Stream.
func (s Stream) IsZero() bool { return s.h == 0 }

// StreamNonBlocking is CU_STREAM_NON_BLOCKING: the stream does not wait for
// the legacy default stream.
const StreamNonBlocking = 1

// StreamCreate creates a stream in the current context (cuStreamCreate)
// with flags (0 or StreamNonBlocking).
func StreamCreate(flags uint32) (Stream, error) {
	if err := Init(); err != nil {
		return Stream{}, err
	}
	h, r := drvStreamCreate(flags)
	return Stream{h: h}, check("cuStreamCreate", r)
}

// Destroy destroys the stream (cuStreamDestroy), with its context current.
func (s Stream) Destroy() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuStreamDestroy", drvStreamDestroy(s.h))
}

// Synchronize waits for the stream's work (cuStreamSynchronize).
func (s Stream) Synchronize() error {
	if err := Init(); err != nil {
		return err
	}
	return check("cuStreamSynchronize", drvStreamSynchronize(s.h))
}

// Query reports whether the stream's work is done (cuStreamQuery): true
// once it is, false while it runs (CUDA_ERROR_NOT_READY), else the error.
func (s Stream) Query() (bool, error) {
	if err := Init(); err != nil {
		return false, err
	}
	switch r := drvStreamQuery(s.h); r {
	case Success:
		return true, nil
	case ErrorNotReady:
		return false, nil
	default:
		return false, &Error{Op: "cuStreamQuery", Result: r}
	}
}

// KernelArg is one kernel parameter by value, of the width of the
// kernel's parameter: make it with ArgU32, ArgI32 or ArgU64.
type KernelArg struct {
	bits  uint64
	width uint8 // bytes: 4 or 8
}

// ArgU32 is an unsigned int parameter.
func ArgU32(v uint32) KernelArg { return KernelArg{bits: uint64(v), width: 4} }

// ArgI32 is an int parameter.
func ArgI32(v int32) KernelArg { return KernelArg{bits: uint64(uint32(v)), width: 4} }

// ArgU64 is a 64-bit parameter: unsigned long long, or a device pointer.
func ArgU64(v uint64) KernelArg { return KernelArg{bits: v, width: 8} }

// MaxKernelArgs is the most parameters LaunchKernel passes.
const MaxKernelArgs = 32

// packArgs lays the parameters out one per 8-byte slot, each value at the
// start of its slot in the machine's byte order: what the driver reads
// through a pointer to the slot is the parameter at its width.
func packArgs(args []KernelArg) []uint64 {
	slots := make([]uint64, len(args))
	for i, a := range args {
		if a.width == 4 {
			*(*uint32)(unsafe.Pointer(&slots[i])) = uint32(a.bits)
		} else {
			slots[i] = a.bits
		}
	}
	return slots
}

// LaunchKernel queues kernel f on stream s over a one-dimensional grid of
// grid blocks of block threads, with sharedMem bytes of dynamic shared
// memory and args as its parameters, in order (cuLaunchKernel). The
// parameters are copied before it returns.
func LaunchKernel(f Function, grid, block, sharedMem uint32, s Stream, args ...KernelArg) error {
	if err := Init(); err != nil {
		return err
	}
	if len(args) > MaxKernelArgs || f.h == 0 {
		return &Error{Op: "cuLaunchKernel", Result: ErrorInvalidValue}
	}
	return check("cuLaunchKernel", drvLaunchKernel(f.h, grid, block, sharedMem, s.h, packArgs(args)))
}
