package pushwire

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/gonixl/gonixl/internal/notif"
)

// StagedChunkPrefix starts the completion of one chunk of a staged WRITE
// cut into several: "PUSH_STAGED_CHUNK:<chunk>:<chunks>:<decode request
// id>:<prefill world size>", with "#<registration_seq>" after the size
// when the registration had one. Each chunk's WRITE carries its own, so that
// decode scatters a chunk while the next one is still moving; decode
// counts the rank's completion once it scattered all <chunks>. The chunk
// numbers come first because a request id may hold ':'. A staged WRITE
// of one chunk sends PUSH_STAGED instead.
const StagedChunkPrefix = "PUSH_STAGED_CHUNK:"

// maxChunkDigits bounds the chunk numbers (the connectors allow 64).
const maxChunkDigits = 4

// StagedChunk is one decoded chunk completion.
type StagedChunk struct {
	notif.Completion
	Chunk, Chunks int
}

// EncodeStagedChunk returns the completion of chunk c of k of request id,
// registered with seq (0: none), from a prefill engine of world size n.
func EncodeStagedChunk(id string, n, c, k int, seq uint64) ([]byte, error) {
	if k < 1 || c < 0 || c >= k || k >= 10000 {
		return nil, fmt.Errorf("%w: PUSH_STAGED_CHUNK: chunk %d of %d", ErrMalformed, c, k)
	}
	comp, err := notif.EncodeSeqCompletion(id, n, seq)
	if err != nil {
		return nil, err
	}
	msg := append([]byte(StagedChunkPrefix), strconv.Itoa(c)...)
	msg = append(append(msg, ':'), strconv.Itoa(k)...)
	return append(append(msg, ':'), comp...), nil
}

// DecodeStagedChunk parses a chunk completion; anything else gives an
// error wrapping ErrMalformed.
func DecodeStagedChunk(msg []byte) (StagedChunk, error) {
	rest, ok := bytes.CutPrefix(msg, []byte(StagedChunkPrefix))
	if !ok {
		return StagedChunk{}, fmt.Errorf("%w: PUSH_STAGED_CHUNK: message does not start with %q", ErrMalformed, StagedChunkPrefix)
	}
	var out StagedChunk
	var err error
	if out.Chunk, rest, err = chunkNumber(rest, "chunk"); err != nil {
		return StagedChunk{}, fmt.Errorf("%w: PUSH_STAGED_CHUNK: %v", ErrMalformed, err)
	}
	if out.Chunks, rest, err = chunkNumber(rest, "chunk count"); err != nil {
		return StagedChunk{}, fmt.Errorf("%w: PUSH_STAGED_CHUNK: %v", ErrMalformed, err)
	}
	if out.Chunks < 1 || out.Chunk >= out.Chunks {
		return StagedChunk{}, fmt.Errorf("%w: PUSH_STAGED_CHUNK: chunk %d of %d", ErrMalformed, out.Chunk, out.Chunks)
	}
	if out.Completion, err = notif.DecodeSeqCompletion(rest); err != nil {
		return StagedChunk{}, fmt.Errorf("%w: PUSH_STAGED_CHUNK: %v", ErrMalformed, err)
	}
	return out, nil
}

// chunkNumber reads a number (notif.ParseDecimal's), named what, and the
// ':' after it.
func chunkNumber(b []byte, what string) (int, []byte, error) {
	i := bytes.IndexByte(b, ':')
	if i < 0 {
		return 0, nil, fmt.Errorf("no ':' after the %s", what)
	}
	n, err := notif.ParseDecimal(b[:i], maxChunkDigits, what)
	if err != nil {
		return 0, nil, err
	}
	return n, b[i+1:], nil
}
