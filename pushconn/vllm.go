package pushconn

import (
	"time"

	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// What changes when the engine speaks vLLM's protocol
// (connector.ProtocolVLLM): the handshakes run over vLLM's side channel
// (internal/engine), PUSH_REG carries exactly vLLM's 11 keys, completions
// are plain "<decode request id>:<prefill world size>", and none of
// gonixl's own messages (PUSH_FAIL, PUSH_CANCEL, PUSH_CANCEL_ACK, the
// staged ones) is sent or acted on. See the package documentation,
// "vLLM's protocol".

// gonixlOnlyToDecode are the prefixes of gonixl's messages to a decode
// rank that vLLM's protocol does not have.
var gonixlOnlyToDecode = []string{pushwire.FailPrefix, pushwire.CancelAckPrefix, pushwire.StagedPrefix, pushwire.StagedChunkPrefix, pushwire.StagedPartPrefix}

// heartbeatExtension is how far a vLLM heartbeat moves a finished
// request's lease: two thirds of the lease from now, as vLLM's prefill
// does (20 s of the default 30 s).
func heartbeatExtension(lease time.Duration) time.Duration { return lease * 2 / 3 }

// vllm reports whether the engine speaks vLLM's protocol.
func (e *pushEngine) vllm() bool { return e.core.VLLM() }

// vllmOpts drops, in vLLM's protocol, what would put gonixl's own keys on
// the wire or match on them: the transfer id. A vLLM engine ignores a
// transfer_id in kv_transfer_params (gonixl's proxy sends one), and so
// does this one: matching is by request id, exactly and then without the
// suffix, as vLLM's prefill matches.
func (e *pushEngine) vllmOpts(o requestOpts) requestOpts {
	if e.vllm() {
		o.transferID = ""
	}
	return o
}
