package server

import "strings"

// answer renders one endpoint's answers; serve runs the request and calls it.
type answer interface {
	// first is the stream's opening chunk, or nil.
	first() any
	// token is the stream chunks for one generated token (none while a
	// parser holds text back); finish is set on the last token (replies.go).
	token(tok int, finish string, stopReason any) []any
	// usage is the stream's closing usage chunk.
	usage(u *usage) any
	// whole is the non-streamed answer.
	whole(toks []int, finish string, stopReason any, u *usage, params any) any
}

// tokenText is the text of the j-th generated token: Detokenize's word, a
// space before every word but the first.
func tokenText(tok, j int) string {
	if j == 0 {
		return Detokenize(tok)
	}
	return " " + Detokenize(tok)
}

// tokensText is the text of generated tokens.
func tokensText(toks []int) string {
	var b strings.Builder
	for j, t := range toks {
		b.WriteString(tokenText(t, j))
	}
	return b.String()
}

// finishPtr is finish as the answers' nullable finish_reason.
func finishPtr(finish string) *string {
	if finish == "" {
		return nil
	}
	return &finish
}

// completionAnswer is /v1/completions' answer. noText (a tokens-only
// engine, which loads no tokenizer) makes every text "", as vLLM's no-op
// detokenizer does.
type completionAnswer struct {
	base   chunk
	noText bool
	n      int // tokens streamed so far
}

func (a *completionAnswer) first() any { return nil }

func (a *completionAnswer) text(f func() string) string {
	if a.noText {
		return ""
	}
	return f()
}

func (a *completionAnswer) token(tok int, finish string, _ any) []any {
	c := a.base
	c.Choices = []choice{{Text: a.text(func() string { return tokenText(tok, a.n) }), FinishReason: finishPtr(finish)}}
	a.n++
	return []any{c}
}

func (a *completionAnswer) usage(u *usage) any {
	c := a.base
	c.Choices, c.Usage = []choice{}, u
	return c
}

func (a *completionAnswer) whole(toks []int, finish string, _ any, u *usage, params any) any {
	return completion{ID: a.base.ID, Object: a.base.Object, Created: a.base.Created, Model: a.base.Model,
		Choices: []choice{{Text: a.text(func() string { return tokensText(toks) }), FinishReason: finishPtr(finish)}}, Usage: u, KVTransferParams: params}
}
