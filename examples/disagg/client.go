package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// sample is one streamed completion as the client saw it.
type sample struct {
	err       error
	ttft      time.Duration // request sent -> first token
	tpot      time.Duration // mean time per output token after the first
	tokens    int
	text      string
	requestID string
}

// load sends n streaming completions to the proxy at url, Poisson arrivals
// at rate per second (0: all at once), each with its own prompt of
// promptWords words, and returns what came back, in request order.
func load(ctx context.Context, url, model string, n int, rate float64, promptWords, maxTokens int, seed uint64) []sample {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]sample, n)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Minute}
	for i := range n {
		if rate > 0 && i > 0 {
			select {
			case <-time.After(time.Duration(rng.ExpFloat64() / rate * float64(time.Second))):
			case <-ctx.Done():
			}
		}
		prompt := promptText(seed, i, promptWords)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = complete(ctx, client, url, model, fmt.Sprintf("disagg-%d-%d", seed, i), prompt, maxTokens)
		}()
	}
	wg.Wait()
	return out
}

// promptText makes prompt i: words no other prompt starts with, so no two
// requests share a prefix.
func promptText(seed uint64, i, words int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "request-%d-%d", seed, i)
	for w := 1; w < words; w++ {
		fmt.Fprintf(&b, " w%d", (i*7919+w*104729)%100003)
	}
	return b.String()
}

// complete sends one streaming request and reads its SSE stream.
func complete(ctx context.Context, client *http.Client, url, model, id, prompt string, maxTokens int) sample {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "stream": true,
		"ignore_eos": true, "stream_options": map[string]any{"include_usage": true}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return sample{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	s := sample{requestID: id}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		s.err = err
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		s.err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, e.Error.Message)
		return s
	}
	var first, last time.Time
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			s.err = fmt.Errorf("bad chunk %q: %w", line, err)
			return s
		}
		if len(chunk.Choices) == 0 || chunk.Choices[0].Text == "" {
			continue // the usage chunk
		}
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		last = now
		s.tokens++
		text.WriteString(chunk.Choices[0].Text)
	}
	switch {
	case sc.Err() != nil:
		s.err = sc.Err()
	case !done:
		s.err = fmt.Errorf("stream ended without [DONE]")
	case s.tokens == 0:
		s.err = fmt.Errorf("no token streamed")
	}
	if s.err != nil {
		return s
	}
	s.ttft = first.Sub(start)
	if s.tokens > 1 {
		s.tpot = last.Sub(first) / time.Duration(s.tokens-1)
	}
	s.text = text.String()
	return s
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(k, len(s)-1))]
}
