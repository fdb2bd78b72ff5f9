// Package cudamem is test support for GPU runs: it allocates, fills, copies
// and frees device memory through the CUDA driver API. It is pure Go over
// internal/cuda, gonixl's one loader of the driver (libcuda.so.1, loaded at
// run time with gonixl's own prototypes), so that building the tests needs no
// CUDA headers or libraries — only the driver on the machine that runs them.
// The driver is reached only in a build with the tag `cuda`; without it every
// function returns an error matching ErrUnavailable. It exists to put KV
// caches in VRAM for the binding's and the connectors' GPU tests and
// benchmarks, not as a CUDA binding for users.
package cudamem
