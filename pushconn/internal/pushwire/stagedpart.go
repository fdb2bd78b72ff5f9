package pushwire

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/gonixl/gonixl/internal/notif"
)

// StagedPartPrefix starts the notification a prefill rank sends with a
// progressive staged WRITE (a part): "PUSH_STAGED_PART:<from>:<to>:<decode
// request id>:<prefill world size>", with "#<registration_seq>" after the
// size when the registration had one. The part wrote image blocks
// [<from>, <to>) of every region of the rank's image into decode's
// offered slot; decode scatters them into its blocks at once, so that at
// RequestFinished only the blocks not yet scattered remain. It is no
// completion: the rank is counted on its PUSH_STAGED or PUSH_STAGED_CHUNK
// completions, as before. Only a decode rank whose registration said it
// understands parts (Staging.Parts, our own key "staging_parts") receives
// it. The block numbers come first because a request id may hold ':'.
const StagedPartPrefix = "PUSH_STAGED_PART:"

// MaxPartBlock bounds the block numbers of a part (an image of a billion
// blocks is no request's).
const MaxPartBlock = 999_999_999

// maxPartDigits is the length of MaxPartBlock in decimal.
const maxPartDigits = 9

// StagedPart is one decoded part notification: image blocks [From, To).
type StagedPart struct {
	notif.Completion
	From, To int
}

// EncodeStagedPart returns the notification of a part that wrote image
// blocks [from, to) of request id, registered with seq (0: none), from a
// prefill engine of world size n.
func EncodeStagedPart(id string, n, from, to int, seq uint64) ([]byte, error) {
	if from < 0 || to <= from || to > MaxPartBlock {
		return nil, fmt.Errorf("%w: PUSH_STAGED_PART: blocks [%d, %d), want 0 <= from < to <= %d", ErrMalformed, from, to, MaxPartBlock)
	}
	comp, err := notif.EncodeSeqCompletion(id, n, seq)
	if err != nil {
		return nil, fmt.Errorf("%w: PUSH_STAGED_PART: %v", ErrMalformed, err)
	}
	msg := append([]byte(StagedPartPrefix), strconv.Itoa(from)...)
	msg = append(append(msg, ':'), strconv.Itoa(to)...)
	return append(append(msg, ':'), comp...), nil
}

// DecodeStagedPart parses a part notification; anything else gives an
// error wrapping ErrMalformed.
func DecodeStagedPart(msg []byte) (StagedPart, error) {
	rest, ok := bytes.CutPrefix(msg, []byte(StagedPartPrefix))
	if !ok {
		return StagedPart{}, fmt.Errorf("%w: PUSH_STAGED_PART: message does not start with %q", ErrMalformed, StagedPartPrefix)
	}
	var out StagedPart
	var err error
	if out.From, rest, err = partNumber(rest, "first block"); err != nil {
		return StagedPart{}, fmt.Errorf("%w: PUSH_STAGED_PART: %v", ErrMalformed, err)
	}
	if out.To, rest, err = partNumber(rest, "end block"); err != nil {
		return StagedPart{}, fmt.Errorf("%w: PUSH_STAGED_PART: %v", ErrMalformed, err)
	}
	if out.To <= out.From {
		return StagedPart{}, fmt.Errorf("%w: PUSH_STAGED_PART: blocks [%d, %d) are empty", ErrMalformed, out.From, out.To)
	}
	if out.Completion, err = notif.DecodeSeqCompletion(rest); err != nil {
		return StagedPart{}, fmt.Errorf("%w: PUSH_STAGED_PART: %v", ErrMalformed, err)
	}
	return out, nil
}

// partNumber reads a block number, named what, and the ':' after it.
func partNumber(b []byte, what string) (int, []byte, error) {
	i := bytes.IndexByte(b, ':')
	if i < 0 {
		return 0, nil, fmt.Errorf("no ':' after the %s", what)
	}
	n, err := notif.ParseDecimal(b[:i], maxPartDigits, what)
	if err != nil {
		return 0, nil, err
	}
	return n, b[i+1:], nil
}
