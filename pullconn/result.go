package pullconn

import "time"

// Result is how one loaded request ended on a decode rank. Err is nil when
// every block arrived and the completions were sent. Otherwise Err says why
// (match it with ErrTransfer, ErrTimeout, ErrHandshake, ErrIncompatible,
// ErrInvalid or ErrClosed) and, under PolicyRecompute, InvalidBlocks lists
// the request's local blocks whose content must be recomputed; under
// PolicyFail it is nil and the engine fails the request.
type Result struct {
	RequestID     string
	Err           error
	InvalidBlocks []int
	// Start is when Load was called and End when the request ended (its
	// result was published), on the configured Clock.
	Start, End time.Time
}
