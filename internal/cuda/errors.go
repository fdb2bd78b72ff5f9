package cuda

import (
	"errors"
	"strconv"
)

// ErrUnavailable is matched by the error of Init, and so of every function
// that needs the driver, when the package was built without the `cuda` tag
// or the driver cannot be loaded or initialized.
var ErrUnavailable = errors.New("cuda: driver unavailable")

// Result is a CUresult, the status code every driver call returns. A
// Result other than Success is an error: errors.Is(err, ErrorNotReady)
// matches an *Error carrying it.
type Result int

// The CUresult codes gonixl tests for, with the values of the driver API.
const (
	Success                       Result = 0
	ErrorInvalidValue             Result = 1
	ErrorOutOfMemory              Result = 2
	ErrorNotInitialized           Result = 3
	ErrorNoDevice                 Result = 100
	ErrorInvalidDevice            Result = 101
	ErrorInvalidContext           Result = 201
	ErrorNotFound                 Result = 500
	ErrorNotReady                 Result = 600
	ErrorPeerAccessAlreadyEnabled Result = 704
)

// names are the CUresult names of the driver API for the codes most
// likely met; Name asks the driver (cuGetErrorName) for the others.
var names = map[Result]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	214: "CUDA_ERROR_ECC_UNCORRECTABLE",
	217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	218: "CUDA_ERROR_INVALID_PTX",
	221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
	709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	711: "CUDA_ERROR_TOO_MANY_PEERS",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	800: "CUDA_ERROR_NOT_PERMITTED",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	999: "CUDA_ERROR_UNKNOWN",
}

// Name returns the CUresult's name (CUDA_ERROR_OUT_OF_MEMORY): from the
// table above, else from the driver when it is loaded, else "CUresult(n)".
func (r Result) Name() string {
	if n, ok := names[r]; ok {
		return n
	}
	if symbols.Load() {
		if n := drvErrorName(r); n != "" {
			return n
		}
	}
	return "CUresult(" + strconv.Itoa(int(r)) + ")"
}

// Error returns the name, the code and, when the driver is loaded and
// knows the code, its description: "CUDA_ERROR_OUT_OF_MEMORY (2): out of
// memory".
func (r Result) Error() string {
	s := r.Name() + " (" + strconv.Itoa(int(r)) + ")"
	if symbols.Load() {
		if d := drvErrorString(r); d != "" {
			s += ": " + d
		}
	}
	return s
}

// Error is a failed driver call: the entry point (Op, "cuMemAlloc") and
// its CUresult, which it unwraps to.
type Error struct {
	Op     string
	Result Result
}

func (e *Error) Error() string { return e.Op + ": " + e.Result.Error() }

// Unwrap returns the Result, so that errors.Is matches the code.
func (e *Error) Unwrap() error { return e.Result }

// check returns nil for Success, else the *Error of op.
func check(op string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Op: op, Result: r}
}
