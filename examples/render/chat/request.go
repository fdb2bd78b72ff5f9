package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Request is the subset of vLLM's ChatCompletionRequest
// (vllm/entrypoints/openai/chat_completion/protocol.py@0.34.0) that the
// render tier reads. Fields it does not know are kept in Extra and written
// back by MarshalJSON, as vLLM's OpenAIBaseModel (extra="allow") keeps them.
type Request struct {
	Model               string          `json:"model,omitempty"`
	Messages            []Turn          `json:"messages"`
	Tools               []Tool          `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       json.RawMessage `json:"stream_options,omitempty"`
	Stop                Stop            `json:"stop,omitempty"`
	StopTokenIDs        []int           `json:"stop_token_ids,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	TopK                *int            `json:"top_k,omitempty"`
	MinP                *float64        `json:"min_p,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	N                   *int            `json:"n,omitempty"`
	IgnoreEOS           bool            `json:"ignore_eos,omitempty"`
	// ChatTemplateKwargs go to the template as variables (enable_thinking).
	ChatTemplateKwargs  map[string]any  `json:"chat_template_kwargs,omitempty"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt,omitempty"`
	IncludeReasoning    *bool           `json:"include_reasoning,omitempty"`
	SkipSpecialTokens   *bool           `json:"skip_special_tokens,omitempty"`
	ReturnTokenIDs      *bool           `json:"return_token_ids,omitempty"`
	RequestID           string          `json:"request_id,omitempty"`
	CacheSalt           string          `json:"cache_salt,omitempty"`
	Priority            int             `json:"priority,omitempty"`
	KVTransferParams    json.RawMessage `json:"kv_transfer_params,omitempty"`
	UseBeamSearch       bool            `json:"use_beam_search,omitempty"`

	// Extra holds the fields this type does not name, verbatim.
	Extra map[string]json.RawMessage `json:"-"`
}

// Turn is one chat turn (an element of "messages"). Content is a string, null, or a list of parts
// ({"type":"text","text":...}); Text reads it. Reasoning is vLLM 0.34.0's
// name ("reasoning"); "reasoning_content" is accepted on input.
type Turn struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Reasoning  *string         `json:"reasoning,omitempty"`
}

type turnJSON Turn

// UnmarshalJSON accepts reasoning_content as an alias of reasoning.
func (m *Turn) UnmarshalJSON(b []byte) error {
	var aux struct {
		turnJSON
		ReasoningContent *string `json:"reasoning_content"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*m = Turn(aux.turnJSON)
	if m.Reasoning == nil {
		m.Reasoning = aux.ReasoningContent
	}
	return nil
}

// Text returns the message's text: the string, or the text parts joined by
// "\n" (vLLM's "string" content format); null is "".
func (m *Turn) Text() (string, error) {
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || string(c) == "null" {
		return "", nil
	}
	if c[0] == '"' {
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return "", fmt.Errorf("content: %w", err)
		}
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return "", fmt.Errorf("content must be a string, null or a list of text parts: %w", err)
	}
	texts := make([]string, 0, len(parts))
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("content part %d has type %q; only text parts are supported", i, p.Type)
		}
		texts = append(texts, *p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// TextContent returns a Content value holding s.
func TextContent(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// Tool is an OpenAI tool definition.
type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction describes a callable function; Parameters is a JSON schema.
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ToolCall is a call the assistant made, in OpenAI's shape; Arguments is a
// JSON text.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function part of a ToolCall.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Stop is "stop": a string or a list of strings.
type Stop []string

// UnmarshalJSON accepts a string, a list of strings or null.
func (s *Stop) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = Stop{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop must be a string or a list of strings")
	}
	*s = many
	return nil
}

type requestJSON Request

var requestFields = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range []string{"model", "messages", "tools", "tool_choice", "parallel_tool_calls",
		"max_tokens", "max_completion_tokens", "stream", "stream_options", "stop", "stop_token_ids",
		"temperature", "top_p", "top_k", "min_p", "seed", "n", "ignore_eos", "chat_template_kwargs",
		"add_generation_prompt", "include_reasoning", "skip_special_tokens", "return_token_ids",
		"request_id", "cache_salt", "priority", "kv_transfer_params", "use_beam_search"} {
		m[k] = true
	}
	return m
}()

// UnmarshalJSON decodes the known fields and keeps the rest in Extra.
func (r *Request) UnmarshalJSON(b []byte) error {
	var known requestJSON
	if err := json.Unmarshal(b, &known); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for k := range all {
		if requestFields[k] {
			delete(all, k)
		}
	}
	if len(all) == 0 {
		all = nil
	}
	known.Extra = all
	*r = Request(known)
	return nil
}

// MarshalJSON writes the known fields and then Extra.
func (r Request) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(requestJSON(r))
	if err != nil || len(r.Extra) == 0 {
		return b, err
	}
	extra, err := json.Marshal(r.Extra)
	if err != nil {
		return nil, err
	}
	if len(b) == 2 { // "{}"
		return extra, nil
	}
	out := append(b[:len(b)-1:len(b)-1], ',')
	return append(out, extra[1:]...), nil
}

// EnableThinking is chat_template_kwargs.enable_thinking, true when absent
// (Qwen3's default, and vLLM's qwen3 parser's).
func (r *Request) EnableThinking() bool {
	if v, ok := r.ChatTemplateKwargs["enable_thinking"].(bool); ok {
		return v
	}
	return true
}

// skipSpecial is skip_special_tokens, true by default as in vLLM's
// SamplingParams.
func (r *Request) skipSpecial() bool {
	return r.SkipSpecialTokens == nil || *r.SkipSpecialTokens
}

// toolsActive says whether the request lets the model call tools.
func (r *Request) toolsActive() bool {
	if len(r.Tools) == 0 {
		return false
	}
	var choice string
	if json.Unmarshal(r.ToolChoice, &choice) == nil && choice == "none" {
		return false
	}
	return true
}
