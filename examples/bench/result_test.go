package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The run file has vLLM's keys (raw samples in seconds, statistics in
// milliseconds, flattened into the object) and reads back.
func TestResultJSONSchema(t *testing.T) {
	cfg := runConfig{BaseURL: "http://x", Model: "m", InputLen: 4, OutputLen: 3, NumPrompts: 2, RequestRate: math.Inf(1),
		Goodput: slo{TTFT: time.Second}, Percentiles: []float64{50, 99}, Seed: 9, Mode: "push", Machine: "here"}
	samples := []sample{
		{Start: msd(1), TTFT: msd(10), Latency: msd(30), OutputTokens: 3, PromptTokens: 4, ITL: []time.Duration{msd(10), msd(10)}, Text: "abc"},
		{Start: msd(2), PromptTokens: 4, Err: assert.AnError},
	}
	r := newResult(cfg, samples, summarize(samples, time.Second, cfg.Goodput, cfg.Percentiles))
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"backend", "base_url", "completed", "date", "duration", "e2els", "errors", "failed", "generated_texts", "goodput",
		"input_lens", "itls", "machine", "max_concurrency", "mean_e2el_ms", "mean_itl_ms", "mean_tpot_ms", "mean_ttft_ms",
		"median_e2el_ms", "median_itl_ms", "median_tpot_ms", "median_ttft_ms", "mode", "model_id", "num_prompts", "output_lens", "output_throughput",
		"p50_e2el_ms", "p50_itl_ms", "p50_tpot_ms", "p50_ttft_ms", "p99_e2el_ms", "p99_itl_ms", "p99_tpot_ms", "p99_ttft_ms",
		"random_input_len", "random_output_len", "request_goodput", "request_rate", "request_throughput", "seed", "start_times",
		"std_e2el_ms", "std_itl_ms", "std_tpot_ms", "std_ttft_ms", "total_input_tokens", "total_output_tokens", "total_token_throughput", "ttfts"}
	assert.Equal(t, want, keys)
	assert.Equal(t, "inf", m["request_rate"])
	assert.Nil(t, m["max_concurrency"])
	assert.Equal(t, []any{0.01, 0.0}, m["ttfts"], "seconds")
	assert.Equal(t, []any{[]any{0.01, 0.01}, []any{}}, m["itls"])
	assert.Equal(t, []any{3.0, 0.0}, m["output_lens"])
	assert.Equal(t, []any{"", assert.AnError.Error()}, m["errors"])
	assert.InDelta(t, 10, m["mean_ttft_ms"], 1e-9)
	assert.InDelta(t, 10, m["mean_tpot_ms"], 1e-9)
	assert.InDelta(t, 1, m["request_goodput"], 1e-9)

	var back result
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, r.Metrics, back.Metrics)
	assert.Equal(t, r.TTFTs, back.TTFTs)
	assert.Equal(t, 1, back.Completed)
}

func TestWriteJSONMakesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path, err := writeJSON(dir, "x.json", map[string]int{"k": 1})
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.JSONEq(t, `{"k":1}`, string(b))
}
