package pushwire

import (
	"bytes"
	"fmt"

	"github.com/gonixl/gonixl/internal/notif"
)

// StagedPrefix starts the completion a prefill rank sends when it wrote a
// request into the decode staging slot its registration offered instead
// of into the blocks: "PUSH_STAGED:<decode request id>:<prefill world
// size>", with "#<registration_seq>" after the size when the registration
// had one (notif.EncodeSeqCompletion). Decode scatters the rank's part of
// the slot into the blocks before it counts the completion. Only a decode
// rank that offered a slot (our own key "staging" in PUSH_REG) receives
// it, so a vLLM decode never does.
const StagedPrefix = "PUSH_STAGED:"

// EncodeStaged returns the staged completion of request id, registered
// with seq (0: none), from a prefill engine of world size n.
func EncodeStaged(id string, n int, seq uint64) ([]byte, error) {
	c, err := notif.EncodeSeqCompletion(id, n, seq)
	if err != nil {
		return nil, err
	}
	return append([]byte(StagedPrefix), c...), nil
}

// DecodeStaged parses a staged completion; anything else gives an error
// wrapping ErrMalformed.
func DecodeStaged(msg []byte) (notif.Completion, error) {
	if !bytes.HasPrefix(msg, []byte(StagedPrefix)) {
		return notif.Completion{}, fmt.Errorf("%w: PUSH_STAGED: message does not start with %q", ErrMalformed, StagedPrefix)
	}
	c, err := notif.DecodeSeqCompletion(msg[len(StagedPrefix):])
	if err != nil {
		return notif.Completion{}, fmt.Errorf("%w: PUSH_STAGED: %v", ErrMalformed, err)
	}
	return c, nil
}
