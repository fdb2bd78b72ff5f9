package vllm

import "github.com/gonixl/gonixl/descriptors"

// TransferTokens returns how many of a prompt's promptTokens tokens a
// request of a model with layout l moves in vLLM's protocol, the count the
// block lists cover and remote_num_tokens carries: for a model with SSM
// (Mamba, GDN) state, one less when the prompt has more than one token,
// else all of them. vLLM's prefill drops the last prompt token of such a
// request before it runs it (its state is then the state before that
// token), and its decode counts the remote tokens as one less and runs the
// last prompt token itself, to get the first logits and the state after
// it: _truncate_mamba_request_for_prefill (called from on_new_request for
// do_remote_decode) and _get_remote_prefill_token_count in
// nixl/base_scheduler.py at 0050936b22adda2ef0197fa3bb2551fe6c5437dc, which
// pull and push share. Both sides must agree on the count, so a gonixl
// engine in vLLM's protocol computes and lists the same tokens.
func TransferTokens(l *descriptors.Layout, promptTokens int) int {
	if promptTokens <= 1 {
		return promptTokens
	}
	for _, g := range l.Groups {
		if g.Kind == descriptors.KindSSM {
			return promptTokens - 1
		}
	}
	return promptTokens
}
