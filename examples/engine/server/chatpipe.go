package server

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gonixl/gonixl/examples/render/chat"
)

// An engine given a chat.Pipeline (Config.Chat) serves /v1/chat/completions
// as `vllm serve` without --tokens-only does: the pipeline's template and
// tokenizer make the prompt, the engine generates, and the pipeline's
// detokenizer and parsers split the answer into content, reasoning and tool
// calls, at once or token by token in a stream (docs/engine.md, "Chat in
// process"). The render tier (examples/render/server) runs the same
// pipeline out of process; the answers are the same.

// pipelineChatRequest reads a chat request for Config.Chat: the prompt
// rendered by the pipeline (or the proxy's prompt_token_ids), max_tokens
// defaulting to the pipeline's max_model_len minus the prompt, as vLLM and
// the render server resolve it.
func (s *Server) pipelineChatRequest(body []byte, reqID string) (*request, *commonFields, *pipelineChatAnswer, *fieldError) {
	var cf commonFields
	var cr chatRequest
	if e := decodeRequest(body, &cf, &cr); e != nil {
		return nil, nil, nil, e
	}
	var creq chat.Request
	if err := json.Unmarshal(body, &creq); err != nil {
		return nil, nil, nil, badRequest("", "The request is not a chat request this engine reads: %v.", err)
	}
	p := s.cfg.Chat
	toks := cr.PromptTokenIDs
	cf.promptParam = "prompt_token_ids"
	if toks == nil {
		ids, err := p.Render(&creq)
		if err != nil {
			var be *chat.BadRequestError
			if errors.As(err, &be) {
				return nil, nil, nil, badRequest("messages", "%s", be.Msg)
			}
			return nil, nil, nil, &fieldError{http.StatusInternalServerError, "", "Rendering the chat failed: " + err.Error()}
		}
		toks, cf.promptParam = ids, "messages"
	} else if len(toks) == 0 {
		return nil, nil, nil, badRequest("prompt_token_ids", "prompt_token_ids is empty; leave it out to render messages, or pass on the prefill answer's prompt_token_ids.")
	} else if e := checkTokenIDs("prompt_token_ids", toks, s.cfg.VocabSize); e != nil {
		return nil, nil, nil, e
	}
	if cr.MaxCompletionTokens != nil {
		if *cr.MaxCompletionTokens < 1 {
			return nil, nil, nil, badRequest("max_completion_tokens", "max_completion_tokens must be at least 1, got %d.", *cr.MaxCompletionTokens)
		}
		cf.MaxTokens, cf.maxTokensParam = cr.MaxCompletionTokens, "max_completion_tokens"
	}
	if cf.MaxTokens == nil {
		n := max(p.MaxModelLen()-len(toks), 1)
		cf.MaxTokens = &n
	}
	r, e := s.newRequest(&cf, toks, reqID)
	if e != nil {
		return nil, nil, nil, e
	}
	r.gen.stopTokens = creq.StopTokenIDs
	a := &pipelineChatAnswer{chatAnswer: chatAnswer{base: chatCompletion{ID: "chatcmpl-" + reqID, Created: s.cfg.Clock.Now().Unix(), Model: cf.Model}},
		p: p, req: &creq}
	if cf.ReturnTokenIDs {
		a.promptIDs = toks
	}
	return r, &cf, a, nil
}

// pipelineMessage is the assistant message of a derendered answer.
type pipelineMessage struct {
	chat.Message
}

// pipelineDelta is a stream chunk's delta: the role on the first, then the
// pipeline's delta.
type pipelineDelta struct {
	Role string `json:"role,omitempty"`
	chat.Delta
}

type pipelineChoice struct {
	Index        int              `json:"index"`
	Message      *pipelineMessage `json:"message,omitempty"`
	Delta        *pipelineDelta   `json:"delta,omitempty"`
	Logprobs     any              `json:"logprobs"`
	FinishReason *string          `json:"finish_reason"`
	StopReason   any              `json:"stop_reason"`
}

type pipelineCompletion struct {
	ID               string           `json:"id"`
	Object           string           `json:"object"`
	Created          int64            `json:"created"`
	Model            string           `json:"model"`
	Choices          []pipelineChoice `json:"choices"`
	Usage            *usage           `json:"usage,omitempty"`
	PromptTokenIDs   []int            `json:"prompt_token_ids,omitempty"`
	KVTransferParams any              `json:"kv_transfer_params,omitempty"`
}

// pipelineChatAnswer renders a chat answer with the pipeline: a stream's
// chunks from a chat.Stream, one token at a time (its work per chunk is the
// chunk's), the whole answer from chat.Pipeline.Derender. finish_reason
// "stop" becomes "tool_calls" when the answer called a tool, as vLLM's chat
// serving and the render server's derender write it.
type pipelineChatAnswer struct {
	chatAnswer
	p      *chat.Pipeline
	req    *chat.Request
	stream *chat.Stream
	sent   bool // the role went out
}

func (a *pipelineChatAnswer) first() any { return nil }

func (a *pipelineChatAnswer) chunk(ch pipelineChoice) pipelineCompletion {
	c := pipelineCompletion{ID: a.base.ID, Object: "chat.completion.chunk", Created: a.base.Created, Model: a.base.Model, Choices: []pipelineChoice{ch}}
	return c
}

func (a *pipelineChatAnswer) token(tok int, finish string, stopReason any) []any {
	if a.stream == nil {
		a.stream = a.p.NewStream(a.req)
	}
	d, err := a.stream.Next([]int{tok})
	if err != nil {
		// The engine's tokens are below the pipeline's vocabulary
		// (Config.VocabSize): not expected; say so in the stream.
		return []any{json.RawMessage(errorBody(http.StatusInternalServerError, "", "Derendering the answer failed: "+err.Error()))}
	}
	if finish != "" {
		f := a.stream.Finish()
		d.Content += f.Content
		d.Reasoning += f.Reasoning
		d.ToolCalls = append(d.ToolCalls, f.ToolCalls...)
	}
	if d.Empty() && finish == "" && a.sent {
		return nil
	}
	pd := &pipelineDelta{Delta: d}
	if !a.sent {
		pd.Role, a.sent = "assistant", true
	}
	if finish == finishStop && a.stream.ToolsStreamed() {
		finish = "tool_calls"
	}
	c := a.chunk(pipelineChoice{Delta: pd, FinishReason: finishPtr(finish)})
	if finish != "" {
		c.Choices[0].StopReason = stopReason
	}
	if a.promptIDs != nil && pd.Role != "" {
		c.PromptTokenIDs = a.promptIDs
	}
	return []any{c}
}

func (a *pipelineChatAnswer) usage(u *usage) any {
	c := pipelineCompletion{ID: a.base.ID, Object: "chat.completion.chunk", Created: a.base.Created, Model: a.base.Model, Choices: []pipelineChoice{}, Usage: u}
	return c
}

func (a *pipelineChatAnswer) whole(toks []int, finish string, stopReason any, u *usage, params any) any {
	msg, err := a.p.Derender(a.req, toks)
	if err != nil {
		return &apiError{http.StatusInternalServerError, "server_error", "Derendering the answer failed: " + err.Error(), ""}
	}
	if finish == finishStop && len(msg.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	return pipelineCompletion{ID: a.base.ID, Object: "chat.completion", Created: a.base.Created, Model: a.base.Model,
		Choices: []pipelineChoice{{Message: &pipelineMessage{msg}, FinishReason: finishPtr(finish), StopReason: stopReason}},
		Usage:   u, PromptTokenIDs: a.promptIDs, KVTransferParams: params}
}

// DemoReplyTexts are the reply script of the render tier's demos and tests
// (examples/disagg -render): a reasoned answer, a reasoned Hermes tool
// call, and a plain answer, in the markup the default pipeline's qwen3
// reasoning and hermes tool-call parsers split.
var DemoReplyTexts = []string{
	"<think>\nThe user greets me; a short friendly answer will do.\n</think>\n\nHello! I am a simulated model: my KV cache was computed by prefill and verified by decode.",
	"<think>\nThe user asks for the weather, so I call the tool.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
	// Qwen3 answers without thinking with an empty think block; without
	// one, its reasoning parser (as vLLM's) takes the whole text for
	// reasoning, the chat template having opened the block.
	"<think>\n\n</think>\n\nThe KV cache moved from the prefill engine to the decode engine, and decode checked every byte.",
}

// ReplyScript tokenizes texts with p: a Config.Replies that the pipeline
// derenders back into the texts' content, reasoning and tool calls.
func ReplyScript(p *chat.Pipeline, texts []string) [][]int {
	out := make([][]int, len(texts))
	for i, t := range texts {
		out[i] = p.Tokenize(t)
	}
	return out
}
