package pushconn

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/connector"
)

// Errors that only push results and calls report, matched with errors.Is;
// the errors both connectors report are connector's (connector.ErrInvalid,
// connector.ErrClosed, connector.ErrHandshake, connector.ErrIncompatible,
// connector.ErrAborted, connector.ErrStaging, connector.ErrPrefillGone).
var (
	// ErrRegistrationTimeout ends a decode request that did not receive
	// every completion within the registration timeout.
	ErrRegistrationTimeout = errors.New("pushconn: registration timed out")
	// ErrPushFailed is matched by *PushError: a prefill rank reported that
	// it will not write the request.
	ErrPushFailed = errors.New("pushconn: prefill reported a push failure")
	// ErrNotifySend is matched by a decode result whose registration could
	// not be sent to a prefill rank.
	ErrNotifySend = errors.New("pushconn: could not send the registration")
)

// The shared errors as this package reports them: prefixed with its name,
// matching connector's.
var (
	errInvalid = fmt.Errorf("pushconn: %w", connector.ErrInvalid)
	errClosed  = fmt.Errorf("pushconn: %w", connector.ErrClosed)
	errAborted = fmt.Errorf("pushconn: %w", connector.ErrAborted)
	errStaging = fmt.Errorf("pushconn: %w", connector.ErrStaging)
	// errPrefillGone ends a request whose prefill engine is gone.
	errPrefillGone = fmt.Errorf("pushconn: %w", connector.ErrPrefillGone)
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
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}
