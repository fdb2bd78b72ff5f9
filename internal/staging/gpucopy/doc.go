// Package gpucopy is the staging path's copier for GPU memory: the
// gather/scatter kernel of segcopy.cu, loaded at run time from the PTX
// committed beside it (cuModuleLoadData) and launched on the copier's own
// stream (cuLaunchKernel) through libcuda.so.1, opened with dlopen. Building
// it needs no CUDA headers or toolkit; it needs the `cuda` build tag, and
// without it New returns an error matching ErrUnavailable.
package gpucopy

import "errors"

// ErrUnavailable is returned by New when there is no CUDA driver, or in a
// build without the `cuda` tag.
var ErrUnavailable = errors.New("gpucopy: CUDA unavailable (build with -tags cuda and install the NVIDIA driver)")
