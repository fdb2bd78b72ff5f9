package pullconn

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/internal/handshake"
)

// Errors that results and calls match with errors.Is.
var (
	// ErrInvalid: a configuration, Params or block list that cannot be
	// used; the message names the field.
	ErrInvalid = errors.New("pullconn: invalid argument")
	// ErrIncompatible: the two engines cannot exchange blocks (transfer
	// mode, model, dtype, layout, TP pairing); the message names both values.
	ErrIncompatible = handshake.ErrIncompatible
	// ErrHandshake: the prefill engine's side channel could not be reached
	// or answered badly within the handshake timeout.
	ErrHandshake = handshake.ErrFailed
	// ErrTransfer: posting a READ failed, or it failed in flight.
	ErrTransfer = errors.New("pullconn: transfer failed")
	// ErrTimeout: a READ stayed in flight past the transfer timeout.
	ErrTimeout = errors.New("pullconn: transfer timed out")
	// ErrClosed: the connector was closed while the request was pending,
	// or its Engine was closed before the rank was created.
	ErrClosed = errors.New("pullconn: connector closed")
	// ErrExpired: prefill's hold of the blocks (Params.RemoteBlocksExpiryTime,
	// extended by answered heartbeats) would end, or has ended, before the
	// READ could be finished: decode did not use bytes the hold may no
	// longer cover.
	ErrExpired = errors.New("pullconn: prefill hold expired")
	// ErrAborted: the engine aborted the request (Consumer.Abort).
	ErrAborted = errors.New("pullconn: request aborted")
	// ErrStaging: a gather into or a scatter out of a staging slot failed
	// (the copier failed; see Staging).
	ErrStaging = errors.New("pullconn: staging copy failed")
	// ErrNotHeld: prefill did not pin, for this decode engine, exactly the
	// hold the Params name (its id, blocks, deadline, staging slot and
	// nonce), or the READs ended after the pin they asked for: the bytes
	// read cannot be trusted. Forged or replayed Params, a hold that ran out
	// early (a clock step) or a rank that never held the request give it.
	ErrNotHeld = errors.New("pullconn: prefill does not hold the request")
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
