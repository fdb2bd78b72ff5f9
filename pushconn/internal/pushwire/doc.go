// Package pushwire encodes and decodes the notifications that only the
// push connector sends: the decode side's early registration of its
// destination blocks (PUSH_REG, a wire format shared with vLLM's push
// connector and pinned by testdata/push_reg.json) and the prefill side's
// explicit failure report (PUSH_FAIL), decode's cancel (PUSH_CANCEL) and
// prefill's acknowledgement of it (PUSH_CANCEL_ACK), and the staged
// completions and part notifications (PUSH_STAGED, PUSH_STAGED_CHUNK,
// PUSH_STAGED_PART), gonixl's own, specified in docs/push-protocol.md. They arrive from the network, so decoding is
// strict, bounded and allocation-limited: bad bytes give an error wrapping
// ErrMalformed, never a panic and never an allocation larger than the input.
package pushwire
