package nixl

import (
	"errors"
	"fmt"
)

// Status is a NIXL result code (nixl_status_t). Success and InProgress are
// results; every negative status is a failure and reaches callers as an *Error.
type Status int32

// Status values, equal to nixl_status_t's.
const (
	StatusInProgress       Status = 1
	StatusSuccess          Status = 0
	StatusNotPosted        Status = -1
	StatusInvalidParam     Status = -2
	StatusBackend          Status = -3
	StatusNotFound         Status = -4
	StatusMismatch         Status = -5
	StatusNotAllowed       Status = -6
	StatusRepostActive     Status = -7
	StatusUnknown          Status = -8
	StatusNotSupported     Status = -9
	StatusRemoteDisconnect Status = -10
	StatusCanceled         Status = -11
	StatusNoTelemetry      Status = -12
)

var statusNames = map[Status]string{
	StatusInProgress:       "NIXL_IN_PROG",
	StatusSuccess:          "NIXL_SUCCESS",
	StatusNotPosted:        "NIXL_ERR_NOT_POSTED",
	StatusInvalidParam:     "NIXL_ERR_INVALID_PARAM",
	StatusBackend:          "NIXL_ERR_BACKEND",
	StatusNotFound:         "NIXL_ERR_NOT_FOUND",
	StatusMismatch:         "NIXL_ERR_MISMATCH",
	StatusNotAllowed:       "NIXL_ERR_NOT_ALLOWED",
	StatusRepostActive:     "NIXL_ERR_REPOST_ACTIVE",
	StatusUnknown:          "NIXL_ERR_UNKNOWN",
	StatusNotSupported:     "NIXL_ERR_NOT_SUPPORTED",
	StatusRemoteDisconnect: "NIXL_ERR_REMOTE_DISCONNECT",
	StatusCanceled:         "NIXL_ERR_CANCELED",
	StatusNoTelemetry:      "NIXL_ERR_NO_TELEMETRY",
}

// String returns NIXL's name for the status, such as "NIXL_ERR_NOT_FOUND".
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("nixl_status_t(%d)", int32(s))
}

// IsError reports whether the status is a failure.
func (s Status) IsError() bool { return s < 0 }

// Sentinel errors, one per failing status, for errors.Is. An *Error matches
// the sentinel of its status.
var (
	ErrNotPosted        = &statusError{StatusNotPosted}
	ErrInvalidParam     = &statusError{StatusInvalidParam}
	ErrBackend          = &statusError{StatusBackend}
	ErrNotFound         = &statusError{StatusNotFound}
	ErrMismatch         = &statusError{StatusMismatch}
	ErrNotAllowed       = &statusError{StatusNotAllowed}
	ErrRepostActive     = &statusError{StatusRepostActive}
	ErrUnknown          = &statusError{StatusUnknown}
	ErrNotSupported     = &statusError{StatusNotSupported}
	ErrRemoteDisconnect = &statusError{StatusRemoteDisconnect}
	ErrCanceled         = &statusError{StatusCanceled}
	ErrNoTelemetry      = &statusError{StatusNoTelemetry}
)

// ErrClosed is returned by every method of an agent after Close.
var ErrClosed = errors.New("nixl: agent is closed")

// ErrUnavailable is returned by New when gonixl was built without the `nixl`
// build tag, or when NIXL's libraries cannot be used.
var ErrUnavailable = errors.New("nixl: the native NIXL agent is not available in this build")

type statusError struct{ s Status }

func (e *statusError) Error() string { return "nixl: " + e.s.String() }

// sentinel returns the sentinel error for a failing status, or nil.
func sentinel(s Status) error {
	switch s {
	case StatusNotPosted:
		return ErrNotPosted
	case StatusInvalidParam:
		return ErrInvalidParam
	case StatusBackend:
		return ErrBackend
	case StatusNotFound:
		return ErrNotFound
	case StatusMismatch:
		return ErrMismatch
	case StatusNotAllowed:
		return ErrNotAllowed
	case StatusRepostActive:
		return ErrRepostActive
	case StatusUnknown:
		return ErrUnknown
	case StatusNotSupported:
		return ErrNotSupported
	case StatusRemoteDisconnect:
		return ErrRemoteDisconnect
	case StatusCanceled:
		return ErrCanceled
	case StatusNoTelemetry:
		return ErrNoTelemetry
	}
	return nil
}

// Error is a failed agent call: which call, the status NIXL returned, and
// what the caller can learn or do about it.
type Error struct {
	Op     string // the NIXL call, e.g. "nixlAgent::registerMem"
	Status Status
	Msg    string // detail; may be empty
}

// NewError returns an *Error for a failing status. Agent implementations
// outside this package (such as nixl/loopback) use it so their errors match
// the same sentinels as the native agent's.
func NewError(op string, s Status, format string, args ...any) *Error {
	return &Error{Op: op, Status: s, Msg: fmt.Sprintf(format, args...)}
}

// Error returns "nixl: <op>: <status>[: <msg>]", e.g.
// "nixl: nixlAgent::registerMem: NIXL_ERR_NOT_FOUND: ...".
func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("nixl: %s: %s", e.Op, e.Status)
	}
	return fmt.Sprintf("nixl: %s: %s: %s", e.Op, e.Status, e.Msg)
}

// Unwrap returns the sentinel of the error's status, so errors.Is works.
func (e *Error) Unwrap() error { return sentinel(e.Status) }

// StatusOf returns the NIXL status carried by err: StatusSuccess for nil, the
// status of an *Error or sentinel anywhere in err's chain, and StatusUnknown
// otherwise.
func StatusOf(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.s
	}
	return StatusUnknown
}

// checkStatus turns a raw status into the (Status, error) pair the Go API
// returns: results pass through, failures become an *Error.
func checkStatus(op string, s Status) (Status, error) {
	if s.IsError() {
		return s, &Error{Op: op, Status: s}
	}
	return s, nil
}
