package cudamem

import "errors"

// ErrUnavailable is matched (errors.Is) by the error of every function when
// the package was built without the `cuda` tag or the CUDA driver library
// cannot be loaded or initialized.
var ErrUnavailable = errors.New("cudamem: CUDA driver not available (build with -tags cuda on a machine with libcuda.so.1)")
