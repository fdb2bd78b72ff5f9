package main

import (
	"context"
	"math/rand"
	"strings"
	"sync"
	"time"
)

// words make the prompts: prompts share prefixes and differ, as users' do.
var words = strings.Fields(`the quick brown fox jumps over a lazy dog while seven engines move blocks of
memory between hosts and every request ends exactly once with its bytes intact under load idle bursts
and restarts at the same address`)

// drawCall draws one ordinary call: completion or chat, streamed or not, a
// prompt of 4 to 120 words, 1 to 48 tokens.
func drawCall(rng *rand.Rand) call {
	n := 4 + rng.Intn(117)
	p := make([]string, n)
	for i := range p {
		p[i] = words[rng.Intn(len(words))]
	}
	return call{Chat: rng.Intn(2) == 0, Stream: rng.Intn(2) == 0, Behave: behaveNormal, Prompt: strings.Join(p, " "), MaxTokens: 1 + rng.Intn(48)}
}

// traffic sends calls and collects their results.
type traffic struct {
	c    *client
	base string
	wg   sync.WaitGroup
	mu   sync.Mutex
	res  []result
}

func (t *traffic) send(k call) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		r := t.c.do(context.Background(), t.base, k)
		t.mu.Lock()
		t.res = append(t.res, r)
		t.mu.Unlock()
	}()
}

// wait waits for every call sent; each has the client's deadline, so this
// ends.
func (t *traffic) wait() []result {
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.res
}

// steady sends Poisson arrivals at rate for d, each call drawn by rng, and
// extra(i) (when not nil) may replace the i-th call.
func (t *traffic) steady(rng *rand.Rand, rate float64, d time.Duration, extra func(i int, k call) call) {
	start := time.Now()
	at := time.Duration(0)
	for i := 0; ; i++ {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= d {
			return
		}
		k := drawCall(rng)
		if extra != nil {
			k = extra(i, k)
		}
		time.Sleep(time.Until(start.Add(at)))
		t.send(k)
	}
}
