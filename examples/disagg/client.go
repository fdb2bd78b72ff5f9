package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gonixl/gonixl/examples/completions"
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

// complete sends one streaming request through the benchmark's client.
func complete(ctx context.Context, client *http.Client, url, model, id, prompt string, maxTokens int) sample {
	c := completions.Stream(ctx, client, url, model, id, prompt, len(strings.Fields(prompt)), maxTokens)
	s := sample{err: c.Err, ttft: c.TTFT, tokens: c.OutputTokens, text: c.Text, requestID: id}
	if c.Err == nil && c.OutputTokens > 1 {
		s.tpot = (c.Latency - c.TTFT) / time.Duration(c.OutputTokens-1)
	}
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
