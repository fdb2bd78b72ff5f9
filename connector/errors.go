package connector

import (
	"errors"

	"github.com/gonixl/gonixl/internal/handshake"
)

// Errors that results and calls of both connectors match with errors.Is;
// each connector prefixes the messages with its name ("pullconn: invalid
// argument: RankConfig.Lease is -1s"). What only one connector reports is
// in its package (pullconn.ErrNotHeld, pushconn.ErrPushFailed, ...).
var (
	// ErrInvalid: a configuration, Params, registration or block list that
	// cannot be used; the message names the field and its value. The call
	// changed nothing.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the rank or its Engine was closed before the call, or
	// while the request was pending.
	ErrClosed = errors.New("connector closed")
	// ErrHandshake: the peer engine's side channel could not be reached, or
	// answered badly, within the handshake timeout.
	ErrHandshake = handshake.ErrFailed
	// ErrIncompatible: the two engines cannot exchange blocks (transfer
	// mode, model, dtype, layout, TP pairing); the message names both
	// values.
	ErrIncompatible = handshake.ErrIncompatible
	// ErrAborted: the engine aborted the request (Consumer.Abort).
	ErrAborted = errors.New("request aborted")
	// ErrPrefillGone: the prefill engine a request was prefilled on is
	// gone (its agent disconnected, or the engine restarted at its address,
	// another incarnation publishing there) and with it what it held or was
	// to write for the request: its bytes cannot be moved. The next request
	// handshakes with the engine again.
	ErrPrefillGone = errors.New("prefill engine gone")
	// ErrStaging: a gather into or a scatter out of a staging slot failed
	// (the Copier failed; see Staging).
	ErrStaging = errors.New("staging copy failed")
)
