// Package gpucopy is the staging path's copier for GPU memory: the
// gather/scatter kernel of segcopy.cu, loaded at run time from the PTX
// committed beside it (cuModuleLoadData) and launched on the copier's own
// stream (cuLaunchKernel). It is pure Go: the driver calls go through
// internal/cuda, gonixl's one loader of libcuda.so.1 (dlopen, no CUDA headers
// or toolkit needed to build). The driver is there only in a build with the
// `cuda` tag; without it, or without a driver, New returns an error matching
// ErrUnavailable.
package gpucopy

import "errors"

// ErrUnavailable is matched (errors.Is) by the error of New when there is no
// CUDA driver, or in a build without the `cuda` tag.
var ErrUnavailable = errors.New("gpucopy: CUDA unavailable (build with -tags cuda and install the NVIDIA driver)")
