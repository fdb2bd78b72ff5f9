package completions

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatBody is the JSON body sent to /v1/chat/completions.
type ChatBody struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	MaxTokens     int            `json:"max_tokens"`
	IgnoreEOS     bool           `json:"ignore_eos"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options"`
}

// StreamChat is Stream for a chat: messages go to url +
// /v1/chat/completions and the reply's text is the chunks' delta content,
// timed the same way. Sample.Text is the reply as the next turn sends it
// back.
func StreamChat(ctx context.Context, client *http.Client, url, model, requestID string, messages []Message, promptTokens, outputLen int) Sample {
	s := Sample{PromptTokens: promptTokens}
	body, err := json.Marshal(ChatBody{Model: model, Messages: messages, MaxTokens: outputLen,
		IgnoreEOS: true, Stream: true, StreamOptions: map[string]any{"include_usage": true}})
	if err != nil {
		s.Err = err
		return s
	}
	return post(ctx, client, strings.TrimSuffix(url, "/")+"/v1/chat/completions", requestID, body, s, chatText)
}

// chatText is a chat chunk's delta content.
func chatText(line []byte) (string, *int, error) {
	c, usage, err := firstChoice[struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	}](line)
	if err != nil || c == nil {
		return "", usage, err
	}
	return c.Delta.Content, usage, nil
}
