package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
)

// result is one run's JSON file. Its keys are those of `vllm bench serve
// --save-result` (raw samples in seconds, statistics in milliseconds), so
// tools written for vLLM's files read ours; the keys after "errors" are
// gonixl's own.
type result struct {
	Date                 string             `json:"date"`
	Backend              string             `json:"backend"`
	ModelID              string             `json:"model_id"`
	BaseURL              string             `json:"base_url"`
	NumPrompts           int                `json:"num_prompts"`
	RequestRate          any                `json:"request_rate"` // a number, or "inf"
	MaxConcurrency       *int               `json:"max_concurrency"`
	Goodput              string             `json:"goodput,omitempty"`
	Duration             float64            `json:"duration"`
	Completed            int                `json:"completed"`
	Failed               int                `json:"failed"`
	TotalInputTokens     int                `json:"total_input_tokens"`
	TotalOutputTokens    int                `json:"total_output_tokens"`
	RequestThroughput    float64            `json:"request_throughput"`
	RequestGoodput       *float64           `json:"request_goodput"`
	OutputThroughput     float64            `json:"output_throughput"`
	TotalTokenThroughput float64            `json:"total_token_throughput"`
	Metrics              map[string]float64 `json:"-"` // mean_ttft_ms, p99_tpot_ms, ... flattened into the object
	InputLens            []int              `json:"input_lens"`
	OutputLens           []int              `json:"output_lens"`
	StartTimes           []float64          `json:"start_times"`
	TTFTs                []float64          `json:"ttfts"`
	ITLs                 [][]float64        `json:"itls"`
	E2ELs                []float64          `json:"e2els"`
	GeneratedTexts       []string           `json:"generated_texts"`
	Errors               []string           `json:"errors"`

	Mode      string `json:"mode,omitempty"` // pull, pull-inline or push (sweeps)
	InputLen  int    `json:"random_input_len"`
	OutputLen int    `json:"random_output_len"`
	Seed      uint64 `json:"seed"`
	Machine   string `json:"machine,omitempty"`
}

// newResult builds the file of a run from its samples and summary.
func newResult(cfg runConfig, samples []sample, s summary) result {
	r := result{Date: time.Now().UTC().Format(time.RFC3339), Backend: "openai", ModelID: cfg.Model, BaseURL: cfg.BaseURL,
		NumPrompts: cfg.NumPrompts, RequestRate: rateValue(cfg.RequestRate), Goodput: cfg.Goodput.String(),
		Duration: s.Duration.Seconds(), Completed: s.Completed, Failed: s.Failed,
		TotalInputTokens: s.TotalInput, TotalOutputTokens: s.TotalOutput,
		RequestThroughput: s.RequestThroughput, OutputThroughput: s.OutputThroughput, TotalTokenThroughput: s.TotalTokenThroughput,
		Metrics: map[string]float64{}, Mode: cfg.Mode, InputLen: cfg.InputLen, OutputLen: cfg.OutputLen, Seed: cfg.Seed, Machine: cfg.Machine}
	if cfg.MaxConcurrency > 0 {
		r.MaxConcurrency = &cfg.MaxConcurrency
	}
	if !math.IsNaN(s.RequestGoodput) {
		g := s.RequestGoodput
		r.RequestGoodput = &g
	}
	for name, d := range map[string]distribution{"ttft": s.TTFT, "tpot": s.TPOT, "itl": s.ITL, "e2el": s.E2EL} {
		r.Metrics["mean_"+name+"_ms"] = d.Mean
		r.Metrics["median_"+name+"_ms"] = d.Median
		r.Metrics["std_"+name+"_ms"] = d.Std
		for k, v := range d.Percentiles {
			r.Metrics[k+"_"+name+"_ms"] = v
		}
	}
	for _, x := range samples {
		r.InputLens = append(r.InputLens, x.PromptTokens)
		r.StartTimes = append(r.StartTimes, x.Start.Seconds())
		r.TTFTs = append(r.TTFTs, x.TTFT.Seconds())
		r.E2ELs = append(r.E2ELs, x.Latency.Seconds())
		itl := make([]float64, len(x.ITL))
		for i, d := range x.ITL {
			itl[i] = d.Seconds()
		}
		r.ITLs = append(r.ITLs, itl)
		r.GeneratedTexts = append(r.GeneratedTexts, x.Text)
		if x.Err != nil {
			r.OutputLens = append(r.OutputLens, 0)
			r.Errors = append(r.Errors, x.Err.Error())
		} else {
			r.OutputLens = append(r.OutputLens, x.OutputTokens)
			r.Errors = append(r.Errors, "")
		}
	}
	return r
}

func rateValue(r float64) any {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return r
}

// MarshalJSON writes the struct's keys, then the metrics flattened into the
// same object, as vLLM's file has them.
func (r result) MarshalJSON() ([]byte, error) {
	type plain result
	b, err := json.Marshal(plain(r))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range r.Metrics {
		m[k] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON wrote, the metrics back into Metrics.
func (r *result) UnmarshalJSON(b []byte) error {
	type plain result
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	p.Metrics = map[string]float64{}
	for k, v := range m {
		if len(k) > 3 && k[len(k)-3:] == "_ms" {
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			p.Metrics[k] = f
		}
	}
	*r = result(p)
	return nil
}

// writeJSON writes v as indented JSON to dir/name, making dir.
func writeJSON(dir, name string, v any) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}
