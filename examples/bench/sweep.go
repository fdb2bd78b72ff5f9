package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gonixl/gonixl/examples/stack"
)

// sweepConfig is a sweep: every mode x rate x input length of a preset,
// each point a fresh stack and one run.
type sweepConfig struct {
	Preset     preset
	Goodput    slo
	Percentile []float64
	Seed       uint64
	ResultDir  string // the sweep's JSON, plots, and runs/ with one file per point
	Machine    string
	Command    string
	Progress   io.Writer
	Log        io.Writer
	// Native runs the engines on NIXL agents (build tag nixl) instead of
	// loopback agents with the preset's modeled link and post cost.
	Native bool
	// Processes, when set, runs each point's engines and proxy as separate
	// programs (engines built with -tags nixl: NIXL agents over UCX).
	Processes *stack.Programs
	// Base, when set, is an earlier sweep this one merges into: its points
	// stay, except those this sweep runs again, and the result keeps its
	// setting with this sweep's added to Merged.
	Base *sweepResult
}

// point is one sweep point's figures.
type point struct {
	Mode              string             `json:"mode"`
	RequestRate       float64            `json:"request_rate"`
	InputLen          int                `json:"input_len"`
	OutputLen         int                `json:"output_len"`
	NumPrompts        int                `json:"num_prompts"`
	Completed         int                `json:"completed"`
	Failed            int                `json:"failed"`
	Duration          float64            `json:"duration"`
	RequestThroughput float64            `json:"request_throughput"`
	RequestGoodput    *float64           `json:"request_goodput"`
	OutputThroughput  float64            `json:"output_throughput"`
	Metrics           map[string]float64 `json:"metrics"` // mean_ttft_ms, p99_tpot_ms, ...
	// What the engines saw: KV bytes decode verified and mismatches (real
	// bytes, scaled geometry), and the NIXL transfers of the run (modeled
	// descriptors: each moved descriptor stands for the preset's ratio).
	KVBytesVerified  uint64  `json:"kv_bytes_verified"`
	KVVerifyFailures uint64  `json:"kv_verify_failures"`
	Transfers        uint64  `json:"transfers"`
	MeanXferMs       float64 `json:"mean_xfer_ms"`
	MeanDescriptors  float64 `json:"mean_descriptors_per_transfer"`
	// ProgressReports and ProgressRefused are the prefill engine's progress
	// reports to its ranks (one per call and rank), taken and refused: a
	// progressive mode whose reports were refused moved every request
	// whole at its finish.
	ProgressReports   uint64 `json:"progress_reports,omitempty"`
	ProgressRefused   uint64 `json:"progress_refused,omitempty"`
	BlocksLeftPrefill int64  `json:"blocks_left_prefill"`
	BlocksLeftDecode  int64  `json:"blocks_left_decode"`
	FirstError        string `json:"first_error,omitempty"`
	RunFile           string `json:"run_file"`
}

// sweepResult is the sweep's JSON file.
type sweepResult struct {
	Date        string    `json:"date"`
	Preset      string    `json:"preset"`
	Description string    `json:"description"`
	Machine     string    `json:"machine"`
	Command     string    `json:"command"`
	GoVersion   string    `json:"go_version"`
	Agents      string    `json:"agents"`
	Goodput     string    `json:"goodput"`
	Modes       []string  `json:"modes"`
	Rates       []float64 `json:"rates"`
	InputLens   []int     `json:"input_lens"`
	OutputLen   int       `json:"output_len"`
	// CollocatedReplicas is the collocated mode's engine count (0: the
	// sweep has no collocated mode).
	CollocatedReplicas int      `json:"collocated_replicas,omitempty"`
	Points             []point  `json:"points"`
	Merged             []merged `json:"merged,omitempty"`
}

// merged records a sweep whose points were merged into an earlier one's
// file (-merge): when, how, where and what it ran.
type merged struct {
	Date      string    `json:"date"`
	Command   string    `json:"command"`
	Machine   string    `json:"machine"`
	GoVersion string    `json:"go_version"`
	Agents    string    `json:"agents"`
	Modes     []string  `json:"modes"`
	Rates     []float64 `json:"rates"`
	InputLens []int     `json:"input_lens"`
}

// mergeInto returns base with this sweep's grid and setting added: the
// modes, rates and input lengths it lacks appended (rates and lengths kept
// in order), and the sweep recorded in Merged. Base's points stay; each
// point the sweep runs replaces its namesake (addPoint), so an interrupted
// merge leaves a complete file.
func mergeInto(base, r sweepResult) sweepResult {
	out := base
	out.Points = slices.Clone(base.Points)
	out.Modes = slices.Clone(base.Modes)
	for _, m := range r.Modes {
		if !slices.Contains(out.Modes, m) {
			out.Modes = append(out.Modes, m)
		}
	}
	out.Rates = union(base.Rates, r.Rates)
	out.InputLens = union(base.InputLens, r.InputLens)
	if slices.Contains(r.Modes, stack.ModeCollocated) {
		out.CollocatedReplicas = r.CollocatedReplicas
	}
	out.Merged = append(slices.Clone(base.Merged), merged{Date: r.Date, Command: r.Command, Machine: r.Machine, GoVersion: r.GoVersion,
		Agents: r.Agents, Modes: r.Modes, Rates: r.Rates, InputLens: r.InputLens})
	return out
}

func union[T int | float64](a, b []T) []T {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

// addPoint puts pt into r, in place of a point of the same mode, rate and
// input length.
func (r *sweepResult) addPoint(pt point) {
	for i, q := range r.Points {
		if q.Mode == pt.Mode && q.RequestRate == pt.RequestRate && q.InputLen == pt.InputLen {
			r.Points[i] = pt
			return
		}
	}
	r.Points = append(r.Points, pt)
}

// sweep runs every point, writes the sweep's JSON after each (so an
// interrupted sweep keeps what it measured) and returns it.
func sweep(ctx context.Context, cfg sweepConfig) (sweepResult, error) {
	p := cfg.Preset
	if cfg.Processes != nil {
		// Separate processes run split stacks only (a preset's default
		// collocated mode is left out; main refuses it when named).
		p.Modes = slices.DeleteFunc(slices.Clone(p.Modes), func(m string) bool { return m == stack.ModeCollocated })
	}
	res := sweepResult{Date: time.Now().UTC().Format(time.RFC3339), Preset: p.Name, Description: p.Description, Machine: cfg.Machine,
		Command: cfg.Command, GoVersion: runtime.Version(), Agents: "loopback (modeled link and post cost)", Goodput: cfg.Goodput.String(),
		Modes: p.Modes, Rates: p.Rates, InputLens: p.InputLens, OutputLen: p.OutputLen}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	if slices.Contains(p.Modes, stack.ModeCollocated) {
		res.CollocatedReplicas = p.Replicas
		if res.CollocatedReplicas == 0 {
			res.CollocatedReplicas = stack.DefaultReplicas
		}
	}
	switch {
	case cfg.Processes != nil:
		res.Agents = "NIXL (UCX over lo) in separate engine and proxy processes: real transfers, no modeled link or post cost"
	case cfg.Native:
		res.Agents = "NIXL (UCX), in this process: real transfers, no modeled link or post cost"
	}
	if cfg.Base != nil {
		res = mergeInto(*cfg.Base, res)
	}
	var errs []error
	for _, n := range p.InputLens {
		for _, rate := range p.Rates {
			for _, mode := range p.Modes {
				pt, err := sweepPoint(ctx, cfg, mode, rate, n)
				if err != nil {
					return res, fmt.Errorf("%s at %g req/s, input %d: %w", mode, rate, n, err)
				}
				res.addPoint(pt)
				fmt.Fprintf(log, "%-11s input %5d rate %4g: %d/%d done, TTFT mean %8.1f ms p99 %8.1f ms, TPOT mean %6.2f ms, xfer %6.1f ms (%5.0f descs)\n",
					mode, n, rate, pt.Completed, pt.NumPrompts, pt.Metrics["mean_ttft_ms"], pt.Metrics["p99_ttft_ms"], pt.Metrics["mean_tpot_ms"],
					pt.MeanXferMs, pt.MeanDescriptors)
				if pt.ProgressRefused > 0 {
					fmt.Fprintf(log, "%-11s input %5d rate %4g: %d progress reports refused (those requests moved whole at their finish)\n", mode, n, rate, pt.ProgressRefused)
				}
				if pt.Failed > 0 || pt.KVVerifyFailures > 0 {
					errs = append(errs, fmt.Errorf("%s at %g req/s, input %d: %d failed, %d KV mismatches (%s)", mode, rate, n, pt.Failed, pt.KVVerifyFailures, pt.FirstError))
				}
				if _, err := writeJSON(cfg.ResultDir, "sweep.json", res); err != nil {
					return res, err
				}
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
			}
		}
	}
	return res, errors.Join(errs...)
}

// sweepPoint starts a fresh stack, runs one point against its proxy, and
// stops the stack.
func sweepPoint(ctx context.Context, cfg sweepConfig, mode string, rate float64, inputLen int) (point, error) {
	p := cfg.Preset
	var proxyURL string
	var engines []string // whose /metrics the point reads: prefill and decode, or the collocated engines
	var closeStack func() error
	if cfg.Processes != nil {
		logDir := filepath.Join(cfg.ResultDir, "logs", fmt.Sprintf("in%d-rate%g", inputLen, rate))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return point{}, err
		}
		ps, err := startProcessStack(ctx, *cfg.Processes, p, mode, logDir)
		if err != nil {
			return point{}, err
		}
		proxyURL, engines, closeStack = ps.proxy, []string{ps.prefill, ps.decode}, ps.close
	} else {
		s, stop, err := startPresetStack(p, mode, cfg.Native, fmt.Sprintf("%s-%d-%g", mode, inputLen, rate))
		if err != nil {
			return point{}, err
		}
		proxyURL, engines, closeStack = s.URL(), engineURLs(s), stop
	}
	closed := false
	defer func() {
		if !closed {
			closeStack()
		}
	}()
	rc := runConfig{BaseURL: proxyURL, Model: p.Model.Name, InputLen: inputLen, OutputLen: p.OutputLen, NumPrompts: p.Prompts(rate),
		RequestRate: rate, NumWarmups: 1, Goodput: cfg.Goodput, Percentiles: cfg.Percentile, Seed: cfg.Seed,
		RequestTimeout: 5 * time.Minute, Mode: mode, Machine: cfg.Machine, Progress: cfg.Progress,
		Label: fmt.Sprintf("%s %d@%g", mode, inputLen, rate)}
	before := make([]transferStats, len(engines))
	var err error
	for i, e := range engines {
		if before[i], err = scrapeTransfers(ctx, e); err != nil {
			return point{}, err
		}
	}
	samples, dur, err := benchRun(ctx, rc)
	if err != nil && samples == nil {
		return point{}, err
	}
	var xfer transferStats
	for i, e := range engines {
		after, err := scrapeTransfers(ctx, e)
		if err != nil {
			return point{}, err
		}
		xfer = xfer.add(after.sub(before[i]))
	}
	sum := summarize(samples, dur, cfg.Goodput, cfg.Percentile)
	r := newResult(rc, samples, sum)
	r.GeneratedTexts = nil // the decode engine verified every byte of KV; the texts add nothing to a sweep
	name := fmt.Sprintf("%s-in%d-rate%g.json", mode, inputLen, rate)
	if _, err := writeJSON(filepath.Join(cfg.ResultDir, "runs"), name, r); err != nil {
		return point{}, err
	}
	_, descScale := p.scale()
	meanXfer, meanDescs, _ := xfer.mean()
	pt := point{Mode: mode, RequestRate: rate, InputLen: inputLen, OutputLen: p.OutputLen, NumPrompts: rc.NumPrompts,
		Completed: sum.Completed, Failed: sum.Failed, Duration: dur.Seconds(), RequestThroughput: sum.RequestThroughput,
		RequestGoodput: r.RequestGoodput, OutputThroughput: sum.OutputThroughput, Metrics: r.Metrics,
		KVBytesVerified: uint64(xfer.KVVerified), KVVerifyFailures: uint64(xfer.KVVerifyFailures),
		ProgressReports: uint64(xfer.ProgressTaken), ProgressRefused: uint64(xfer.ProgressRefused),
		Transfers: xfer.Transfers, MeanXferMs: ms(meanXfer), MeanDescriptors: meanDescs * descScale, RunFile: filepath.Join("runs", name)}
	for _, x := range samples {
		if x.Err != nil {
			pt.FirstError = x.Err.Error()
			break
		}
	}
	closed = true
	return pt, closeStack()
}

// hostName names the machine for result files.
func hostName() string {
	h, _ := os.Hostname()
	cpu := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s: %d CPUs (%s), %s", h, runtime.NumCPU(), cpu, runtime.GOOS)
}
