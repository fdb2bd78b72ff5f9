package cudamem

import "errors"

// ErrUnavailable is returned when the package was built without the `cuda`
// tag or the CUDA driver library cannot be loaded.
var ErrUnavailable = errors.New("cudamem: CUDA driver not available (build with -tags cuda on a machine with libcuda.so.1)")
