// Package completions is a streaming client of an OpenAI-compatible
// /v1/completions endpoint, timed as vLLM's benchmark client times it. The
// serving benchmark (examples/bench) and the main job (examples/disagg) send
// their requests through it, so both report the same TTFT.
package completions

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Sample is one request as the client saw it, timed as vLLM's benchmark
// client times it: TTFT is the first chunk that carries text, each later
// text chunk adds an inter-token latency, and the latency ends at the last
// text chunk.
type Sample struct {
	Start        time.Duration   // since the run started (set by the caller)
	TTFT         time.Duration   // request sent -> first token
	ITL          []time.Duration // gaps between the text chunks after the first
	Latency      time.Duration   // request sent -> last token
	PromptTokens int
	OutputTokens int // the usage chunk's completion_tokens, else the text chunks
	Text         string
	Err          error
}

// Body is the JSON body sent to /v1/completions.
type Body struct {
	Model         string         `json:"model"`
	Prompt        string         `json:"prompt"`
	MaxTokens     int            `json:"max_tokens"`
	IgnoreEOS     bool           `json:"ignore_eos"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options"`
}

// Stream sends one streaming completion of outputLen tokens (ignore_eos) to
// url + /v1/completions and reads its server-sent events; requestID, if not
// empty, goes in X-Request-Id. The context bounds every wait. A failed
// request is a Sample with Err set, never a panic.
func Stream(ctx context.Context, client *http.Client, url, model, requestID, prompt string, promptTokens, outputLen int) Sample {
	s := Sample{PromptTokens: promptTokens}
	body, err := json.Marshal(Body{Model: model, Prompt: prompt, MaxTokens: outputLen,
		IgnoreEOS: true, Stream: true, StreamOptions: map[string]any{"include_usage": true}})
	if err != nil {
		s.Err = err
		return s
	}
	return post(ctx, client, strings.TrimSuffix(url, "/")+"/v1/completions", requestID, body, s, completionText)
}

// completionText is a /v1/completions chunk's text.
func completionText(line []byte) (string, *int, error) {
	c, usage, err := firstChoice[struct {
		Text string `json:"text"`
	}](line)
	if err != nil || c == nil {
		return "", usage, err
	}
	return c.Text, usage, nil
}

// firstChoice decodes a streamed chunk (one "data:" line's JSON) of choices C: its first
// choice, nil when it has none (the usage chunk), and its usage's completion_tokens, nil when
// it carries no usage.
func firstChoice[C any](line []byte) (*C, *int, error) {
	var chunk struct {
		Choices []C `json:"choices"`
		Usage   *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(line, &chunk); err != nil {
		return nil, nil, err
	}
	var usage *int
	if chunk.Usage != nil {
		usage = &chunk.Usage.CompletionTokens
	}
	if len(chunk.Choices) == 0 {
		return nil, usage, nil
	}
	return &chunk.Choices[0], usage, nil
}

// post sends body to endpoint and reads its stream into s, textOf reading
// each chunk's text and usage.
func post(ctx context.Context, client *http.Client, endpoint, requestID string, body []byte, s Sample,
	textOf func(line []byte) (text string, usage *int, err error)) Sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		s.Err = err
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		s.Err = err
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		s.Err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, e.Error.Message)
		return s
	}
	var last time.Time
	var text strings.Builder
	chunks, usage := 0, -1
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if strings.TrimSpace(line) == "[DONE]" {
			done = true
			break
		}
		txt, u, err := textOf([]byte(line))
		if err != nil {
			s.Err = fmt.Errorf("chunk %q is not JSON: %w", truncate(line, 80), err)
			return s
		}
		if u != nil {
			if *u < 0 {
				s.Err = fmt.Errorf("usage chunk %q: completion_tokens is negative", truncate(line, 80))
				return s
			}
			usage = *u
		}
		if txt == "" {
			continue
		}
		now := time.Now()
		if chunks == 0 {
			s.TTFT = now.Sub(start)
		} else {
			s.ITL = append(s.ITL, now.Sub(last))
		}
		last = now
		chunks++
		text.WriteString(txt)
	}
	switch {
	case sc.Err() != nil:
		s.Err = sc.Err()
	case !done:
		s.Err = errors.New("stream ended without data: [DONE]")
	case chunks == 0:
		s.Err = errors.New("no token streamed")
	}
	if s.Err != nil {
		return s
	}
	s.Latency = last.Sub(start)
	s.OutputTokens = chunks
	if usage >= 0 {
		s.OutputTokens = usage
	}
	s.Text = text.String()
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
