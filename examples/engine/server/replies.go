package server

import (
	"fmt"
	"slices"
)

// generation is how a request's tokens are made and when it stops, beside
// max_tokens: the engine's reply script (Config.Replies), EOS (the script's
// end, unless ignore_eos) and stop token ids (a generate request's
// sampling_params.stop_token_ids). docs/engine.md, "Reply scripts".
type generation struct {
	ignoreEOS  bool
	stopTokens []int
}

// next makes the request's next token and says whether it is the last,
// with the finish reason vLLM gives it:
//
//   - token j is the chosen reply's token j while the reply lasts (replies
//     set), else outputToken(checksum, j); the reply is replies[mix(checksum)
//     mod len(replies)], so the KV decides which reply, and wrong KV shows;
//   - the reply's last token ends the request with "stop", as an EOS token
//     would, unless ignore_eos: then tokens go on from outputToken;
//   - a token among the stop token ids ends it with "stop" and that id as
//     stop_reason (it is part of the output, as in vLLM);
//   - else the max_tokens-th token ends it with "length".
//
// The prefill leg's one token and decode's first are both token 0 of the
// same checksum, so both legs of a request agree, as before replies.
func (r *request) next(replies [][]int) event {
	j := r.generated
	r.generated++
	var reply []int
	if len(replies) > 0 {
		reply = replies[mix64(r.checksum)%uint64(len(replies))]
	}
	ev := event{tok: outputToken(r.checksum, j)}
	if j < len(reply) {
		ev.tok = reply[j]
	}
	switch {
	case slices.Contains(r.gen.stopTokens, ev.tok):
		ev.finish, ev.stopReason = finishStop, ev.tok
	case len(reply) > 0 && j == len(reply)-1 && !r.gen.ignoreEOS:
		ev.finish = finishStop
	case r.generated == r.maxTokens:
		ev.finish = finishLength
	}
	return ev
}

// Finish reasons.
const (
	finishLength = "length"
	finishStop   = "stop"
)

// checkReplies checks Config.Replies: non-empty scripts of token ids in the
// vocabulary.
func checkReplies(replies [][]int, vocab int) error {
	for i, r := range replies {
		if len(r) == 0 {
			return fmt.Errorf("engine: Config.Replies[%d] is empty; every reply needs at least one token", i)
		}
		for j, t := range r {
			if t < 0 || t >= vocab {
				return fmt.Errorf("engine: Config.Replies[%d][%d] is token id %d, outside the vocabulary [0, %d) (Config.VocabSize)", i, j, t, vocab)
			}
		}
	}
	return nil
}
