package pullconn

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/connector"
)

// Errors that only pull results and calls report, matched with errors.Is;
// the errors both connectors report are connector's (connector.ErrInvalid,
// connector.ErrClosed, connector.ErrHandshake, connector.ErrIncompatible,
// connector.ErrAborted, connector.ErrStaging, connector.ErrPrefillGone).
var (
	// ErrTransfer: posting a READ failed, or it failed in flight.
	ErrTransfer = errors.New("pullconn: transfer failed")
	// ErrTimeout: a READ stayed in flight past the transfer timeout.
	ErrTimeout = errors.New("pullconn: transfer timed out")
	// ErrExpired: prefill's hold of the blocks (Params.RemoteBlocksExpiryTime,
	// extended by answered heartbeats) would end, or has ended, before the
	// READ could be finished: decode did not use bytes the hold may no
	// longer cover.
	ErrExpired = errors.New("pullconn: prefill hold expired")
	// ErrNotHeld: prefill did not pin, for this decode engine, exactly the
	// hold the Params name (its id, blocks, deadline, staging slot and
	// nonce), or the READs ended after the pin they asked for: the bytes
	// read cannot be trusted. Forged or replayed Params, a hold that ran out
	// early (a clock step) or a rank that never held the request give it.
	ErrNotHeld = errors.New("pullconn: prefill does not hold the request")
)

// The shared errors as this package reports them: prefixed with its name,
// matching connector's.
var (
	errInvalid = fmt.Errorf("pullconn: %w", connector.ErrInvalid)
	errClosed  = fmt.Errorf("pullconn: %w", connector.ErrClosed)
	errAborted = fmt.Errorf("pullconn: %w", connector.ErrAborted)
	errStaging = fmt.Errorf("pullconn: %w", connector.ErrStaging)
	// errPrefillGone ends a request whose prefill engine is gone.
	errPrefillGone = fmt.Errorf("pullconn: %w", connector.ErrPrefillGone)
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}
