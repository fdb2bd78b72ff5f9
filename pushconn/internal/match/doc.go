// Package match pairs the push connector's two halves of a request on one
// prefill rank: decode's registration of its destination blocks (PUSH_REG)
// and the prefill engine's finished blocks. They arrive in either order; the
// second one to arrive makes the pair. Keys are compared by transfer id when
// both sides carry one, else by exact request id, else by request id with a
// trailing "-" and 8 hex digits stripped, because the proxy gives both legs
// one id and each engine appends its own random suffix. A pair pops its
// entries, so each request is written once per decode rank; registrations
// that never pair expire after a timeout and finished blocks after a lease,
// each reported exactly once. The Matcher is a pure state machine: time is an
// argument, so tests step it and its owner (the writer goroutine) does all
// I/O.
package match
