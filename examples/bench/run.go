package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/gonixl/gonixl/examples/completions"
	"github.com/gonixl/gonixl/examples/loadgen"
)

// runConfig is one benchmark run against one endpoint, with
// `vllm bench serve`'s knobs.
type runConfig struct {
	BaseURL        string
	Model          string
	InputLen       int
	OutputLen      int
	NumPrompts     int
	RequestRate    float64 // requests per second; +Inf sends them all at once
	MaxConcurrency int     // 0: unbounded
	NumWarmups     int     // requests sent one at a time before the run, not counted
	Goodput        slo
	Percentiles    []float64
	Seed           uint64
	RequestTimeout time.Duration // bounds each request
	Mode           string        // recorded in the result (sweeps)
	Machine        string        // recorded in the result
	Progress       io.Writer     // nil: no progress output
	Label          string        // the progress line's label
}

func (c runConfig) validate() error {
	switch {
	case c.BaseURL == "":
		return fmt.Errorf("the endpoint's base URL is required (-base-url)")
	case c.Model == "":
		return fmt.Errorf("the model name is required (-model)")
	case c.InputLen < 1:
		return fmt.Errorf("input length is %d, want >= 1", c.InputLen)
	case c.OutputLen < 1:
		return fmt.Errorf("output length is %d, want >= 1", c.OutputLen)
	case c.NumPrompts < 1:
		return fmt.Errorf("number of prompts is %d, want >= 1", c.NumPrompts)
	case !(c.RequestRate > 0):
		return fmt.Errorf("request rate is %v, want > 0 or inf", c.RequestRate)
	case c.MaxConcurrency < 0:
		return fmt.Errorf("max concurrency is %d, want >= 0", c.MaxConcurrency)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("request timeout is %v, want > 0", c.RequestTimeout)
	}
	return nil
}

// benchRun sends the warm-ups one at a time, then NumPrompts streaming
// requests at Poisson arrivals, and returns every request's sample, in
// prompt order, and the run's duration: from the first request sent to the
// last one ended. Every request ends: with its stream, or with its error
// when RequestTimeout or ctx ends it.
func benchRun(ctx context.Context, cfg runConfig) ([]sample, time.Duration, error) {
	if err := cfg.validate(); err != nil {
		return nil, 0, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second}}
	defer client.CloseIdleConnections()
	one := func(id string, prompt string) sample {
		rctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
		defer cancel()
		return completions.Stream(rctx, client, cfg.BaseURL, cfg.Model, id, prompt, cfg.InputLen, cfg.OutputLen)
	}
	warm := randomPrompts(cfg.NumWarmups, cfg.InputLen, cfg.Seed^0xfeed)
	for i, p := range warm {
		if s := one(fmt.Sprintf("bench-%d-warmup-%d", cfg.Seed, i), p); s.Err != nil {
			return nil, 0, fmt.Errorf("warm-up request %d: %w", i, s.Err)
		}
	}
	prompts := randomPrompts(cfg.NumPrompts, cfg.InputLen, cfg.Seed)
	rate := cfg.RequestRate
	if math.IsInf(rate, 1) {
		rate = 0 // loadgen: all at once
	}
	var sem chan struct{}
	if cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	var bar *progress
	if cfg.Progress != nil {
		bar = newProgress(cfg.Progress, cfg.NumPrompts, cfg.Label)
	}
	out := make([]sample, cfg.NumPrompts)
	var wg sync.WaitGroup
	start := time.Now()
	err := loadgen.Run(ctx, loadgen.Arrivals{Rate: rate, Poisson: true, Seed: int64(cfg.Seed)}, cfg.NumPrompts, func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sem != nil {
				select {
				case sem <- struct{}{}:
					defer func() { <-sem }()
				case <-ctx.Done():
					out[i] = sample{Start: time.Since(start), PromptTokens: cfg.InputLen, Err: ctx.Err()}
					bar.add(true)
					return
				}
			}
			sent := time.Since(start)
			s := one(fmt.Sprintf("bench-%d-%d", cfg.Seed, i), prompts[i])
			s.Start = sent
			out[i] = s
			bar.add(s.Err != nil)
		}()
	})
	wg.Wait()
	dur := time.Since(start)
	if err != nil { // ctx ended before every request was sent
		for i := range out {
			if out[i].Err == nil && out[i].OutputTokens == 0 {
				out[i] = sample{PromptTokens: cfg.InputLen, Err: fmt.Errorf("not sent: %w", err)}
			}
		}
		return out, dur, err
	}
	return out, dur, nil
}
