package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gonixl/gonixl/examples/render/chat"
)

// Client calls a render server. Its zero value is not usable: set BaseURL.
type Client struct {
	// BaseURL is the server's root, e.g. "http://127.0.0.1:8300".
	BaseURL string
	// HTTP is the client used; nil is http.DefaultClient. Deadlines come
	// from the context of each call.
	HTTP *http.Client
	// Pipeline, when set, derenders streams in this process (per chunk cost
	// proportional to the chunk); when nil, streams go to the server's
	// stateless streaming derender, which replays the history per chunk as
	// vLLM 0.34.0 does. It must be configured as the server's is.
	Pipeline *chat.Pipeline
}

// Error is a non-200 answer of the render server.
type Error struct {
	Status  int
	Type    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("render server answered %d %s: %s", e.Status, e.Type, e.Message)
}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("render client: encoding %s request: %w", path, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("render client: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	// Every call is a pure function of its body (a stream's state travels
	// in it), so it may be sent twice. Marked so (a nil Idempotency-Key is
	// not sent), net/http sends it again on a new connection when a
	// kept-alive one closes under it before any answer: the server
	// restarted, or its keep-alive timeout ran out as the call went out
	// (vLLM's render server closes idle connections after 5 s).
	hreq.Header["Idempotency-Key"] = nil
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return fmt.Errorf("render client: POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("render client: reading %s answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var eb struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
			eb.Error.Message = string(b)
		}
		return &Error{Status: resp.StatusCode, Type: eb.Error.Type, Message: eb.Error.Message}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("render client: %s answer is not the expected JSON: %w", path, err)
	}
	return nil
}

// Render renders req; the answer is the body for /inference/v1/generate
// (TokenIDs are the prompt).
func (c *Client) Render(ctx context.Context, req *chat.Request) (*GenerateRequest, error) {
	var gen GenerateRequest
	if err := c.post(ctx, "/v1/chat/completions/render", req, &gen); err != nil {
		return nil, err
	}
	return &gen, nil
}

// DerenderResponse sends a whole derender request.
func (c *Client) DerenderResponse(ctx context.Context, req *DerenderChatRequest) (*ChatCompletionResponse, error) {
	var resp ChatCompletionResponse
	if err := c.post(ctx, "/v1/chat/completions/derender", req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Derender turns one generation's tokens into the assistant message.
func (c *Client) Derender(ctx context.Context, req *chat.Request, tokens []int) (chat.Message, error) {
	resp, err := c.DerenderResponse(ctx, &DerenderChatRequest{ChatRequest: req,
		GenerateResponse: GenerateTokensResponse{Choices: []TokensChoice{{TokenIDs: tokens}}}})
	if err != nil {
		return chat.Message{}, err
	}
	if len(resp.Choices) != 1 {
		return chat.Message{}, fmt.Errorf("render client: derender answered %d choices for 1", len(resp.Choices))
	}
	return resp.Choices[0].Message, nil
}

// NewStream starts a streaming derender of one generation. promptIDs are
// the rendered prompt (vLLM requires them on the stateless path when a
// parser is configured).
func (c *Client) NewStream(req *chat.Request, promptIDs []int) *ClientStream {
	cs := &ClientStream{c: c, req: req, prompt: promptIDs}
	if c.Pipeline != nil {
		cs.local = c.Pipeline.NewStream(req)
	}
	return cs
}

// ClientStream is one generation's streaming derender. Not safe for
// concurrent use.
type ClientStream struct {
	c      *Client
	req    *chat.Request
	prompt []int
	local  *chat.Stream
	state  *StreamState
}

// Next derenders the tokens of one generate chunk. finishReason is the
// chunk's ("" while the generation goes on); the last call flushes held
// text. With a local Pipeline no request is sent.
func (s *ClientStream) Next(ctx context.Context, tokens []int, finishReason string) (chat.Delta, error) {
	if s.local != nil {
		d, err := s.local.Next(tokens)
		if err != nil || finishReason == "" {
			return d, err
		}
		f := s.local.Finish()
		d.Content += f.Content
		d.Reasoning += f.Reasoning
		d.ToolCalls = append(d.ToolCalls, f.ToolCalls...)
		return d, nil
	}
	choice := TokensChoice{TokenIDs: tokens}
	if finishReason != "" {
		choice.FinishReason = &finishReason
	}
	body := &DerenderChatStreamRequest{Stream: true, GenerateChunk: GenerateTokensResponse{Choices: []TokensChoice{choice}},
		StreamState: s.state, PromptTokenIDs: s.prompt, ChatRequest: s.req}
	var resp DerenderChatStreamResponse
	if err := s.c.post(ctx, "/v1/chat/completions/derender", body, &resp); err != nil {
		return chat.Delta{}, err
	}
	s.state = &resp.StreamState
	if len(resp.Chunk.Choices) == 0 {
		return chat.Delta{}, nil
	}
	return resp.Chunk.Choices[0].Delta.Delta, nil
}

// ToolsStreamed says whether a tool call was sent (finish_reason
// "tool_calls").
func (s *ClientStream) ToolsStreamed() bool {
	if s.local != nil {
		return s.local.ToolsStreamed()
	}
	return s.state != nil && s.state.ToolsStreamed
}
