package pushconn

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/internal/handshake"
)

// Errors that results and calls match with errors.Is.
var (
	// ErrInvalid is matched by errors for arguments and configurations
	// that cannot be used; the message names the field and its value.
	ErrInvalid = errors.New("pushconn: invalid argument")
	// ErrClosed is returned by calls on a closed Consumer or Producer, and
	// ends requests still pending when it closes.
	ErrClosed = errors.New("pushconn: closed")
	// ErrRegistrationTimeout ends a decode request that did not receive
	// every completion within the registration timeout.
	ErrRegistrationTimeout = errors.New("pushconn: registration timed out")
	// ErrPushFailed is matched by *PushError: a prefill rank reported that
	// it will not write the request.
	ErrPushFailed = errors.New("pushconn: prefill reported a push failure")
	// ErrHandshake is matched by errors of a handshake that could not
	// complete (unreachable side channel, deadline, bad reply).
	ErrHandshake = handshake.ErrFailed
	// ErrIncompatible is matched by errors of a handshake that was refused:
	// different model, dtype or KV layout, or a push engine paired with a
	// pull engine. The message names both values.
	ErrIncompatible = handshake.ErrIncompatible
	// ErrNotifySend is matched by a decode result whose registration could
	// not be sent to a prefill rank.
	ErrNotifySend = errors.New("pushconn: could not send the registration")
	// ErrAborted ends a decode request that Consumer.Abort ended.
	ErrAborted = errors.New("pushconn: request aborted")

	// ErrStaging: decode could not scatter a prefill rank's staged part of
	// the request out of its staging slot (the copier failed).
	ErrStaging = errors.New("pushconn: staging scatter failed")
)

// PushError is a prefill rank's failure report (a PUSH_FAIL notification)
// as a decode request's error.
type PushError struct {
	// RequestID is decode's request id.
	RequestID string
	// EngineID and Rank name the prefill engine and rank that failed.
	EngineID string
	Rank     int
	// Kind is the step that failed: handshake, layout, post, transfer,
	// expired, closed, overloaded or aborted.
	Kind string
	// Reason is the prefill rank's explanation.
	Reason string
}

// Error says which prefill rank failed, at which step, and why.
func (e *PushError) Error() string {
	return fmt.Sprintf("pushconn: prefill engine %q rank %d failed to push request %q at step %q: %s",
		e.EngineID, e.Rank, e.RequestID, e.Kind, e.Reason)
}

// Is makes errors.Is(err, ErrPushFailed) true.
func (e *PushError) Is(target error) bool { return target == ErrPushFailed }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
