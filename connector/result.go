package connector

import "time"

// Result is how one request ended on a decode rank, as Consumer.Drain of
// either connector returns it, exactly once per request. Err is nil when
// every block arrived. Otherwise Err says why (errors.Is with this
// package's errors or the connector's own) and, under PolicyRecompute,
// InvalidBlocks lists the request's local blocks whose content must be
// recomputed; under PolicyFail it is nil and the engine fails the request.
type Result struct {
	RequestID     string
	Err           error
	InvalidBlocks []int
	// Start is when the request was given to the rank (Load, Register) and
	// End when it ended, on the rank's Clock. A failed push request's
	// Result may come out of Drain later than End: its blocks were kept
	// until no prefill rank could still write into them.
	Start, End time.Time
}

// Policy says what decode does with a request whose blocks could not be
// moved (vLLM's kv_load_failure_policy).
type Policy string

// Failure policies.
const (
	// PolicyFail fails the request; nothing is recomputed (vLLM's default).
	PolicyFail Policy = "fail"
	// PolicyRecompute fails the request but lists the local blocks whose
	// content is invalid in Result.InvalidBlocks, so the engine can
	// recompute them.
	PolicyRecompute Policy = "recompute"
)
