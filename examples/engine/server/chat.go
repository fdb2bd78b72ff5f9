package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// ChatMessage is one message of a chat, its content as text.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatRoles are the roles the template renders.
var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// ChatPrompt renders messages with the engine's chat template, the prompt
// that /v1/chat/completions tokenizes. Each message is its role as one marker
// word, a newline, its content and a newline; the assistant's marker ends the
// prompt, where the reply begins:
//
//	<|system|>
//	Answer briefly.
//	<|user|>
//	Hello there
//	<|assistant|>
//
// The engine's tokenizer makes a token of each whitespace-separated word, so
// each marker is one token and a chat answers exactly what /v1/completions
// answers for ChatPrompt(messages).
func ChatPrompt(messages []ChatMessage) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString("<|" + m.Role + "|>\n" + m.Content + "\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// chatRequest is /v1/chat/completions' own fields (the shared ones are
// decoded apart, as completionRequest says).
type chatRequest struct {
	Messages            json.RawMessage `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	// PromptTokenIDs (the proxy's extension) are the prompt's tokens as the
	// prefill engine rendered them (return_token_ids): decode uses them instead
	// of rendering messages again, so both legs hold the same prompt.
	PromptTokenIDs []int `json:"prompt_token_ids"`
}

const messagesHelp = `send a list of {"role": "user", "content": "..."} objects`

// parseMessages reads messages: a non-empty list of {role, content}, content a
// string or a list of {"type": "text", "text": ...} parts.
func parseMessages(raw json.RawMessage) ([]ChatMessage, *fieldError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("messages", "messages is required; %s.", messagesHelp)
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, badRequest("messages", "messages must be a list; %s.", messagesHelp)
	}
	if len(list) == 0 {
		return nil, badRequest("messages", "messages is empty; %s.", messagesHelp)
	}
	out := make([]ChatMessage, len(list))
	for i, m := range list {
		field := fmt.Sprintf("messages[%d]", i)
		var v struct {
			Role    json.RawMessage `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m, &v) != nil {
			return nil, badRequest(field, "%s must be an object with role and content; %s.", field, messagesHelp)
		}
		var role string
		if len(v.Role) == 0 || string(v.Role) == "null" {
			return nil, badRequest(field+".role", "%s.role is required; use system, developer, user, assistant or tool.", field)
		}
		if json.Unmarshal(v.Role, &role) != nil || !chatRoles[role] {
			return nil, badRequest(field+".role", "%s.role is %s; use system, developer, user, assistant or tool.", field, v.Role)
		}
		text, e := parseContent(field+".content", v.Content)
		if e != nil {
			return nil, e
		}
		out[i] = ChatMessage{Role: role, Content: text}
	}
	return out, nil
}

// parseContent reads a message's content: a string, or text parts joined by
// newlines.
func parseContent(field string, raw json.RawMessage) (string, *fieldError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", badRequest(field, "%s is required; send a string.", field)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", badRequest(field, `%s must be a string or a list of {"type": "text", "text": "..."} parts.`, field)
	}
	texts := make([]string, len(parts))
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", badRequest(fmt.Sprintf("%s[%d]", field, j), `%s[%d] is not a text part; this engine reads only {"type": "text", "text": "..."} parts.`, field, j)
		}
		texts[j] = *p.Text
	}
	return strings.Join(texts, "\n"), nil
}

type chatMessageOut struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatDelta      `json:"delta,omitempty"`
	Logprobs     any             `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type chatCompletion struct {
	ID               string       `json:"id"`
	Object           string       `json:"object"`
	Created          int64        `json:"created"`
	Model            string       `json:"model"`
	Choices          []chatChoice `json:"choices"`
	Usage            *usage       `json:"usage,omitempty"`
	PromptTokenIDs   []int        `json:"prompt_token_ids,omitempty"`
	KVTransferParams any          `json:"kv_transfer_params,omitempty"`
}

// chatAnswer is /v1/chat/completions' answer: chat.completion, or
// chat.completion.chunk events opening with the assistant's role.
type chatAnswer struct {
	base      chatCompletion // id, created, model
	promptIDs []int          // for return_token_ids, else nil
	n         int            // tokens streamed so far
}

func (a *chatAnswer) chunk() chatCompletion {
	c := a.base
	c.Object = "chat.completion.chunk"
	return c
}

func (a *chatAnswer) first() any {
	c := a.chunk()
	empty := ""
	c.Choices = []chatChoice{{Delta: &chatDelta{Role: "assistant", Content: &empty}}}
	c.PromptTokenIDs = a.promptIDs
	return c
}

func (a *chatAnswer) token(tok int, finish string, _ any) []any {
	c := a.chunk()
	text := tokenText(tok, a.n)
	a.n++
	c.Choices = []chatChoice{{Delta: &chatDelta{Content: &text}, FinishReason: finishPtr(finish)}}
	return []any{c}
}

func (a *chatAnswer) usage(u *usage) any {
	c := a.chunk()
	c.Choices, c.Usage = []chatChoice{}, u
	return c
}

func (a *chatAnswer) whole(toks []int, finish string, _ any, u *usage, params any) any {
	c := a.base
	c.Object = "chat.completion"
	c.Choices = []chatChoice{{Message: &chatMessageOut{Role: "assistant", Content: tokensText(toks)}, FinishReason: finishPtr(finish)}}
	c.Usage, c.PromptTokenIDs, c.KVTransferParams = u, a.promptIDs, params
	return c
}

// chatCompletions serves POST /v1/chat/completions: the messages rendered by
// ChatPrompt and tokenized, then served as a completion of that prompt.
func (s *Server) chatCompletions(w http.ResponseWriter, hr *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	body, reqID, ok := s.begin(w, hr)
	if !ok {
		return
	}
	if s.cfg.TokensOnly {
		// vLLM's chat renders the template with the tokenizer a
		// tokens-only server does not load (renderers/base.py@0.34.0).
		writeFieldError(w, badRequest("", msgTextRefused))
		return
	}
	if s.cfg.Chat != nil {
		r, cf, a, e := s.pipelineChatRequest(body, reqID)
		if e != nil {
			writeFieldError(w, e)
			return
		}
		s.serve(w, hr, r, cf, a)
		return
	}
	var cf commonFields
	var cr chatRequest
	if e := decodeRequest(body, &cf, &cr); e != nil {
		writeFieldError(w, e)
		return
	}
	r, e := s.chatRequest(&cf, &cr, reqID)
	if e != nil {
		writeFieldError(w, e)
		return
	}
	a := &chatAnswer{base: chatCompletion{ID: "chatcmpl-" + reqID, Created: s.cfg.Clock.Now().Unix(), Model: cf.Model}}
	if cf.ReturnTokenIDs {
		a.promptIDs = r.tokens
	}
	s.serve(w, hr, r, &cf, a)
}

func (s *Server) chatRequest(cf *commonFields, cr *chatRequest, reqID string) (*request, *fieldError) {
	msgs, e := parseMessages(cr.Messages)
	if e != nil {
		return nil, e
	}
	if cr.MaxCompletionTokens != nil {
		if *cr.MaxCompletionTokens < 1 {
			return nil, badRequest("max_completion_tokens", "max_completion_tokens must be at least 1, got %d.", *cr.MaxCompletionTokens)
		}
		cf.MaxTokens = cr.MaxCompletionTokens // OpenAI's newer name wins
		cf.maxTokensParam = "max_completion_tokens"
	}
	toks := cr.PromptTokenIDs
	cf.promptParam = "prompt_token_ids"
	if toks == nil {
		toks = Tokenize(ChatPrompt(msgs))
		cf.promptParam = "messages"
	} else if len(toks) == 0 {
		return nil, badRequest("prompt_token_ids", "prompt_token_ids is empty; leave it out to render messages, or pass on the prefill answer's prompt_token_ids.")
	} else if e := checkTokenIDs("prompt_token_ids", toks, s.cfg.VocabSize); e != nil {
		return nil, e
	}
	return s.newRequest(cf, toks, reqID)
}
