// Package msgpackread is a strict msgpack reader for bytes from the network:
// the vLLM side-channel codecs (internal/vllm) and the push connector's
// notifications (pushconn/internal/pushwire) both decode with it.
//
// Strict means: every length a header claims is checked against the bytes
// left (and against the caller's limit) before anything is made of it, so a
// decoder never allocates more than the bytes it has seen; strings must be
// UTF-8, as msgspec's decoder demands; values skipped for unknown keys may
// nest at most MaxDepth levels; the unused code 0xc1 is refused.
//
// Every error is an *Error naming the byte it concerns ("at byte N: ...",
// counted from the start of the buffer, so a message's prefix counts too),
// passed through the Reader's wrap function so that each codec's errors
// wrap its own sentinel.
package msgpackread
