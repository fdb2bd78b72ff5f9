package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// What a client does with its request.
const (
	behaveNormal     = "normal"
	behaveSlow       = "slow"       // a streaming client that reads a few hundred bytes at a time, slowly
	behaveDisconnect = "disconnect" // a streaming client that leaves after its first chunk
)

// call is one request the soak sends.
type call struct {
	Chat, Stream bool
	Behave       string
	Prompt       string // a completion's prompt, or a chat's user message
	MaxTokens    int
}

// Outcomes of a call.
const (
	outOK           = "ok"           // answered in full, text equal to the expected
	outError        = "error"        // answered with an error that names its cause
	outNoCause      = "no-cause"     // an error that names no cause: a defect
	outWrongText    = "wrong-text"   // answered in full with other text: wrong KV
	outUnanswered   = "UNANSWERED"   // the client's deadline passed first: a hang
	outDisconnected = "disconnected" // the client left on purpose
	outUnreached    = "unreached"    // no connection to the proxy (it was down)
)

// result is how one call ended.
type result struct {
	Call    call
	Start   time.Time
	Latency time.Duration
	Outcome string
	// Status is the HTTP status (0: none came).
	Status int
	Cause  string
}

// reached says the proxy got the request: it answered with a status.
func (r result) reached() bool { return r.Status != 0 }

// client sends calls to the proxy, each bounded by deadline.
type client struct {
	http     *http.Client
	model    string
	geom     geometry
	deadline time.Duration
}

func (c *client) body(k call) ([]byte, string) {
	m := map[string]any{"model": c.model, "max_tokens": k.MaxTokens, "ignore_eos": true, "stream": k.Stream}
	prompt := k.Prompt
	if k.Chat {
		msgs := []server.ChatMessage{{Role: "user", Content: k.Prompt}}
		m["messages"] = msgs
		prompt = server.ChatPrompt(msgs)
	} else {
		m["prompt"] = k.Prompt
	}
	b, _ := json.Marshal(m)
	return b, prompt
}

// do sends k to base and classifies how it ended; it never waits past the
// client's deadline.
func (c *client) do(ctx context.Context, base string, k call) (res result) {
	res = result{Call: k, Start: time.Now()}
	defer func() { res.Latency = time.Since(res.Start) }()
	ctx, cancel := context.WithTimeout(ctx, c.deadline)
	defer cancel()
	body, prompt := c.body(k)
	path := "/v1/completions"
	if k.Chat {
		path = "/v1/chat/completions"
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return c.failed(ctx, res, err)
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return c.failed(ctx, res, err)
		}
		res.Outcome, res.Cause = outError, errorMessage(resp.StatusCode, b)
		if res.Cause == "" {
			res.Outcome, res.Cause = outNoCause, fmt.Sprintf("HTTP %d with no error message: %q", resp.StatusCode, b)
		}
		return res
	}
	var text string
	if k.Stream {
		text, err = c.readStream(resp.Body, k)
		if errors.Is(err, errLeft) {
			res.Outcome = outDisconnected
			return res
		}
	} else {
		text, err = readWhole(resp.Body, k.Chat)
	}
	if err != nil {
		return c.failed(ctx, res, err)
	}
	want := expectedText(c.geom, prompt, k.MaxTokens)
	if text != want {
		res.Outcome, res.Cause = outWrongText, fmt.Sprintf("got %q, want %q", trunc(text), trunc(want))
		return res
	}
	res.Outcome = outOK
	return res
}

// failed classifies a transport or stream error.
func (c *client) failed(ctx context.Context, res result, err error) result {
	switch {
	case ctx.Err() != nil:
		res.Outcome, res.Cause = outUnanswered, fmt.Sprintf("no answer within the client's deadline %v: %v", c.deadline, err)
	case res.Status == 0 && isRefused(err):
		res.Outcome, res.Cause = outUnreached, err.Error()
	case err.Error() == "":
		res.Outcome, res.Cause = outNoCause, "an error with no message"
	default:
		res.Outcome, res.Cause = outError, err.Error()
	}
	return res
}

func isRefused(err error) bool { return strings.Contains(err.Error(), "connection refused") }

var errLeft = errors.New("the client left")

// streamError is an error event in a stream: its message is the cause.
type streamError struct{ msg string }

func (e streamError) Error() string { return "error event in the stream: " + e.msg }

// readStream reads a stream's events and returns its text; a slow client
// reads small pieces with pauses, a leaving one returns errLeft after the
// first text chunk.
func (c *client) readStream(body io.Reader, k call) (string, error) {
	if k.Behave == behaveSlow {
		body = &slowReader{r: body, n: 256, pause: 20 * time.Millisecond}
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var text strings.Builder
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(line) == "[DONE]" {
			return text.String(), nil
		}
		if msg := errorMessage(0, line); msg != "" {
			return "", streamError{msg}
		}
		t, err := chunkText(line, k.Chat)
		if err != nil {
			return "", fmt.Errorf("stream chunk %q: %w", trunc(string(line)), err)
		}
		text.WriteString(t)
		if k.Behave == behaveDisconnect && t != "" {
			return "", errLeft
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("stream broke off: %w", err)
	}
	return "", errors.New("stream ended without data: [DONE] and without an error event")
}

func chunkText(line []byte, chat bool) (string, error) {
	var chunk struct {
		Choices []struct {
			Text  string `json:"text"`
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(line, &chunk); err != nil {
		return "", err
	}
	if len(chunk.Choices) == 0 {
		return "", nil
	}
	if chat {
		return chunk.Choices[0].Delta.Content, nil
	}
	return chunk.Choices[0].Text, nil
}

func readWhole(body io.Reader, chat bool) (string, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return "", fmt.Errorf("answer broke off: %w", err)
	}
	var a struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &a); err != nil || len(a.Choices) != 1 {
		return "", fmt.Errorf("answer %q is not a completion with one choice (%v)", trunc(string(b)), err)
	}
	if chat {
		return a.Choices[0].Message.Content, nil
	}
	return a.Choices[0].Text, nil
}

// errorMessage is the message of an error body {"error": {"message": ...}}
// ("" if b is none); status, if not 0, prefixes it.
func errorMessage(status int, b []byte) string {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error == nil || strings.TrimSpace(e.Error.Message) == "" {
		return ""
	}
	if status != 0 {
		return fmt.Sprintf("HTTP %d: %s", status, e.Error.Message)
	}
	return e.Error.Message
}

// slowReader hands out at most n bytes per Read, pausing before each.
type slowReader struct {
	r     io.Reader
	n     int
	pause time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.pause)
	if len(p) > s.n {
		p = p[:s.n]
	}
	return s.r.Read(p)
}

func trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
