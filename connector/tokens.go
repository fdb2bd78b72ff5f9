package connector

import (
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/vllm"
)

// VLLMTransferTokens returns the tokens of a prompt of promptTokens that a
// request moves in vLLM's protocol (ProtocolVLLM) for a rank of layout l:
// Request.Tokens of a layout with KV-cache groups, and the count decode's
// lists are allocated for. For a model with an SSM (Mamba) group it is one
// less than the prompt (when the prompt has more than one token): vLLM's
// prefill runs the prompt without its last token, and its decode runs that
// token itself after the transfer, so a gonixl engine paired with vLLM must
// compute, list and move the same tokens. Other models move the whole
// prompt. gonixl's own protocol has no such rule: the tokens are whatever
// the engine computed. Pull and push alike.
func VLLMTransferTokens(l descriptors.Layout, promptTokens int) int {
	return vllm.TransferTokens(&l, promptTokens)
}
