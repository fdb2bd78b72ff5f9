// Package cudamem is test support for GPU runs: it allocates, fills, copies
// and frees device memory through the CUDA driver API, loaded at run time
// from libcuda.so.1 with gonixl's own prototypes, so that building the tests
// needs no CUDA headers or libraries — only the driver on the machine that
// runs them. It is compiled with the build tag `cuda`; without it every
// function returns ErrUnavailable. It exists to put KV caches in VRAM for the
// binding's and the connectors' GPU tests and benchmarks, not as a CUDA
// binding for users.
package cudamem
