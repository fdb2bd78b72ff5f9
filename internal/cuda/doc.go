// Package cuda is gonixl's one loader of the CUDA driver API: it opens
// libcuda.so.1 with dlopen once per process (sync.Once), resolves the driver
// entry points that gonixl uses with its own prototypes (so that building
// needs no CUDA headers or toolkit, only the driver on the machine that runs
// the code), and wraps them as Go functions. The CUresult of every call
// becomes an *Error naming the call and the code (CUDA_ERROR_OUT_OF_MEMORY,
// with the driver's cuGetErrorString text when it has one).
//
// Its users are pure Go: examples/cudamem (device memory for the GPU tests)
// and internal/staging/gpucopy (the gather/scatter kernel). Driver handles
// are kept as integers in Go values and no call hands the driver a Go
// pointer that it keeps past the call: MemcpyHtoDAsync copies only from
// pinned host memory of MemAllocHost, which is C memory.
//
// The driver code is compiled with the build tag `cuda`. Without it the
// package still compiles, and Init, and so every function that reaches the
// driver, returns an error matching ErrUnavailable that names the tag.
//
// Most calls act on the context current on the calling OS thread, as the
// driver's do: run them inside Context.Do, which locks the goroutine to its
// thread and makes the context current there.
package cuda
