// Command bench is a serving benchmark for any OpenAI-compatible
// /v1/completions endpoint (the P/D proxy of examples/proxy, or a vLLM
// proxy), modelled on `vllm bench serve`: random prompts of a given length
// (no two alike), a fixed number of output tokens (ignore_eos), Poisson
// arrivals, streaming, and per request TTFT, TPOT, ITL and end-to-end
// latency, with goodput against an SLO. It writes one JSON file per run (the
// full per-request samples, vLLM's keys) and prints vLLM's summary table.
//
//	# against a running proxy
//	go run ./examples/bench -base-url http://127.0.0.1:8192 -model Qwen/Qwen3-32B \
//	    -random-input-len 1024 -random-output-len 128 -num-prompts 100 -request-rate 4 \
//	    -goodput "ttft:2000 tpot:30" -result-dir results
//	# with no -base-url: a fresh in-process stack on loopback agents
//	go run ./examples/bench -mode push
//	# check the path and the transfer time first, as vLLM's guide asks
//	go run ./examples/bench -preflight -base-url http://127.0.0.1:8192 -model M -engine-urls http://127.0.0.1:8200
//	# the sweep: modes x rates x input lengths, fresh stack per point, JSON and SVG plots
//	go run ./examples/bench -sweep -preset qwen3-32b-h200 -result-dir examples/bench/results/qwen3-32b-h200
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/stack"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	baseURL, model, rate, goodput, percentiles, resultDir, resultFile string
	inputLen, outputLen, numPrompts, maxConc, warmups                 int
	seed                                                              uint64
	timeout                                                           time.Duration
	sweep, preflight                                                  bool
	presetName, mode, modes, rates, inputLens, engineURLs, machine    string
	longPrompts, longLen                                              int
	postCost                                                          time.Duration
	postPerBlock                                                      bool
	agents                                                            string
	replicas                                                          int
	merge                                                             bool
	plotFrom, engineBin, proxyBin                                     string
	// The multi-turn workload (multiturn.go).
	multiturn            bool
	turns, conversations int
	histories            string
	convRate             float64
	// renderTier compares chat completions with and without the render
	// tier (render.go).
	renderTier bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.baseURL, "base-url", "", "the endpoint, e.g. http://127.0.0.1:8192 (empty: start an in-process stack of -preset in -mode)")
	fs.StringVar(&o.model, "model", "", "the model name requests carry (default: with -base-url, the first that its /v1/models lists; else the preset's)")
	fs.IntVar(&o.inputLen, "random-input-len", 1024, "prompt tokens per request")
	fs.IntVar(&o.inputLen, "input-len", 1024, "short for -random-input-len")
	fs.IntVar(&o.outputLen, "random-output-len", 128, "output tokens per request (ignore_eos)")
	fs.IntVar(&o.outputLen, "output-len", 128, "short for -random-output-len")
	fs.IntVar(&o.numPrompts, "num-prompts", 100, "requests in the run")
	fs.StringVar(&o.rate, "request-rate", "inf", `Poisson arrival rate, requests per second, or "inf" (all at once)`)
	fs.IntVar(&o.maxConc, "max-concurrency", 0, "most requests in flight (0: no bound)")
	fs.IntVar(&o.warmups, "num-warmups", 1, "requests sent one at a time first, not counted")
	fs.StringVar(&o.goodput, "goodput", "", `SLO for goodput, e.g. "ttft:2000 tpot:30" (milliseconds; ttft, tpot, e2el)`)
	fs.StringVar(&o.percentiles, "metric-percentiles", "99", "percentiles to report, e.g. 50,90,99")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the prompts and arrivals")
	fs.DurationVar(&o.timeout, "request-timeout", 5*time.Minute, "limit of each request")
	fs.StringVar(&o.resultDir, "result-dir", "", "write the run's JSON (or the sweep's files) here")
	fs.StringVar(&o.resultFile, "result-filename", "", "the run's JSON file name (default: a name from the settings and the time)")
	fs.BoolVar(&o.renderTier, "render-tier", false, "chat completions on the preset's stack in -mode with engines that run the chat pipeline in process, then through the render tier (render server, tokens-only engines): TTFT of each and the proxy's render and derender hop times")
	fs.BoolVar(&o.sweep, "sweep", false, "run the preset's grid of modes x rates x input lengths, a fresh in-process stack per point")
	fs.StringVar(&o.presetName, "preset", small.Name, fmt.Sprintf("in-process stack and sweep setting: %q, %q, %q (16 layers in the scaled geometry, for push-progressive-layers), or a grouped model shape %q or %q", small.Name, qwen3H200.Name, qwen3H200Layers.Name, swaDemo.Name, hybridDemo.Name))
	fs.StringVar(&o.mode, "mode", "push", "in-process stack without -base-url: pull, pull-inline, push, push-progressive (push with chunked prefill reporting progress), push-progressive-layers (the same reporting after each layer too), push-staged and push-progressive-staged (the same with staging slots; loopback only) or collocated (no disaggregation: engines that prefill and decode their own requests)")
	fs.StringVar(&o.modes, "modes", "", "sweep: override the preset's modes, e.g. pull,push")
	fs.IntVar(&o.replicas, "collocated-replicas", stack.DefaultReplicas, "collocated: the engines, each the preset's (its TP and compute model), behind a least-loaded balancer; 2 is the split's GPU count")
	fs.BoolVar(&o.merge, "merge", false, "sweep: start from -result-dir's sweep.json and replace or add only the points this sweep runs (e.g. -modes collocated), keeping the others")
	fs.StringVar(&o.rates, "rates", "", "sweep: override the preset's request rates, e.g. 1,8")
	fs.StringVar(&o.inputLens, "input-lens", "", "sweep: override the preset's input lengths, e.g. 1024,16384")
	fs.BoolVar(&o.preflight, "preflight", false, "check the path (one short request, then long ones one at a time) and the engines' KV transfer time")
	fs.StringVar(&o.engineURLs, "engine-urls", "", "preflight: engines to read /metrics from, comma-separated (decode for pull, prefill for push)")
	fs.IntVar(&o.longPrompts, "preflight-long-prompts", 3, "preflight: long requests sent one at a time")
	fs.IntVar(&o.longLen, "preflight-long-len", 8192, "preflight: tokens of each long prompt")
	fs.DurationVar(&o.postCost, "post-cost", -1, "override the preset's NIXL post cost per (modeled) descriptor, e.g. 500ns")
	fs.StringVar(&o.agents, "agents", "loopback", `stacks: "loopback" (in-process, the preset's modeled link and post cost), "nixl" (in-process NIXL agents over UCX; build with -tags nixl) or "processes" (sweep: engines and proxy as programs built with -tags nixl)`)
	fs.StringVar(&o.engineBin, "engine-bin", "", "-agents processes: the engine program (default: go build -tags nixl ./examples/engine)")
	fs.StringVar(&o.proxyBin, "proxy-bin", "", "-agents processes: the proxy program (default: go build ./examples/proxy)")
	fs.StringVar(&o.plotFrom, "plot", "", "redraw the plots of a sweep from its sweep.json (written beside it) and print its table")
	fs.BoolVar(&o.postPerBlock, "post-per-block", false, "charge the post cost per block and region moved, as a connector that does not merge adjacent blocks (vLLM's) would pay")
	fs.StringVar(&o.machine, "machine", "", "the machine's name in result files (default: host name, CPUs, OS)")
	fs.BoolVar(&o.multiturn, "multiturn", false, "the multi-turn chat workload: a sweep over -histories, bidirectional KV off and on, a fresh in-process pull stack per point")
	fs.IntVar(&o.turns, "turns", 3, "-multiturn: turns per conversation")
	fs.IntVar(&o.conversations, "conversations", 8, "-multiturn: conversations per point")
	fs.StringVar(&o.histories, "histories", "8192,16384,24576", "-multiturn: the last turn's history lengths in tokens")
	fs.Float64Var(&o.convRate, "conversation-rate", 0.5, "-multiturn: Poisson arrivals of conversations per second (0: all at once)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func parseRate(s string) (float64, error) {
	if s == "inf" {
		return math.Inf(1), nil
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || !(r > 0) {
		return 0, fmt.Errorf(`request rate %q: want a positive number or "inf"`, s)
	}
	return r, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	p, err := presetByName(o.presetName)
	if err != nil {
		return err
	}
	if o.postPerBlock {
		p.PostPerBlock = true
		p.Description += " (post cost charged per block and region, as vLLM's connector posts)"
	}
	if o.replicas < 1 {
		return fmt.Errorf("-collocated-replicas is %d, want > 0", o.replicas)
	}
	p.Replicas = o.replicas
	if o.postCost >= 0 {
		p.PostPerDescriptor = o.postCost
		p.Description += fmt.Sprintf(" (post cost overridden: %v per descriptor)", o.postCost)
	}
	goal, err := parseGoodput(o.goodput)
	if err != nil {
		return err
	}
	pcts, err := parsePercentiles(o.percentiles)
	if err != nil {
		return err
	}
	if o.machine == "" {
		o.machine = hostName()
	}
	switch {
	case o.agents == "processes" && !o.sweep:
		return fmt.Errorf("-agents processes is for -sweep; for one run, start the programs and give -base-url")
	case o.merge && !o.sweep:
		return fmt.Errorf("-merge is for -sweep")
	case o.agents != "loopback" && o.agents != "nixl" && o.agents != "processes":
		return fmt.Errorf(`-agents is %q, want "loopback", "nixl" or "processes"`, o.agents)
	}
	if o.plotFrom != "" {
		return replot(o.plotFrom, stdout)
	}
	if o.multiturn {
		return runMultiTurn(ctx, o, p, stdout, stderr)
	}
	if o.renderTier {
		return runRenderTier(ctx, o, p, stdout)
	}
	if o.sweep {
		return runSweep(ctx, o, p, goal, pcts, stdout, stderr)
	}
	// Given -base-url and no -model, the server's /v1/models names the
	// model, once the flags are known to be good (resolveModel).
	askModel := o.model == "" && o.baseURL != ""
	resolveModel := func() {
		if askModel {
			o.model = defaultModel(ctx, o.baseURL, p.Model.Name, stderr)
			askModel = false
		}
	}
	if o.model == "" && o.baseURL == "" {
		o.model = p.Model.Name
	}
	if o.baseURL == "" {
		s, closeStack, err := startPresetStack(p, o.mode, o.agents == "nixl", "run")
		if err != nil {
			return err
		}
		defer closeStack()
		o.baseURL = s.URL()
		if o.engineURLs == "" {
			o.engineURLs = strings.Join(engineURLs(s), ",")
		}
		fmt.Fprintf(stdout, "in-process stack: %s, mode %s, proxy %s\n", p.Description, o.mode, o.baseURL)
	}
	if o.preflight {
		if peers := gpuPeerStatus(ctx); peers != "" {
			fmt.Fprint(stdout, "GPU peer-to-peer status (prefill and decode GPUs):\n"+peers)
		} else {
			fmt.Fprintln(stdout, "preflight: no nvidia-smi here: no GPU peer-to-peer status to show")
		}
		var urls []string
		for _, u := range strings.Split(o.engineURLs, ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
		if len(urls) == 0 {
			return fmt.Errorf("preflight: -engine-urls is required with -base-url (the engines' HTTP base URLs, whose /metrics carry the KV transfer metrics)")
		}
		resolveModel()
		return explain404(ctx, o.baseURL, o.model, preflight(ctx, preflightConfig{BaseURL: o.baseURL, Model: o.model, EngineURLs: urls, LongPrompts: o.longPrompts, LongLen: o.longLen, Timeout: o.timeout, Out: stdout}))
	}
	rate, err := parseRate(o.rate)
	if err != nil {
		return err
	}
	cfg := runConfig{BaseURL: o.baseURL, Model: o.model, InputLen: o.inputLen, OutputLen: o.outputLen, NumPrompts: o.numPrompts, RequestRate: rate,
		MaxConcurrency: o.maxConc, NumWarmups: o.warmups, Goodput: goal, Percentiles: pcts, Seed: o.seed, RequestTimeout: o.timeout,
		Machine: o.machine, Progress: stderr, Label: "bench"}
	if askModel {
		cfg.Model = "(from /v1/models)" // only to check the other flags first
		if err := cfg.validate(); err != nil {
			return err
		}
		resolveModel()
		cfg.Model = o.model
	}
	samples, dur, err := benchRun(ctx, cfg)
	if err != nil && samples == nil {
		return explain404(ctx, o.baseURL, o.model, err)
	}
	sum := summarize(samples, dur, goal, pcts)
	printSummary(stdout, "Serving Benchmark Result", cfg, sum)
	if o.resultDir != "" {
		name := o.resultFile
		if name == "" {
			name = fmt.Sprintf("openai-%vqps-in%d-out%d-%s.json", o.rate, o.inputLen, o.outputLen, time.Now().UTC().Format("20060102-150405"))
		}
		path, werr := writeJSON(o.resultDir, name, newResult(cfg, samples, sum))
		if werr != nil {
			return werr
		}
		fmt.Fprintln(stdout, "result:", path)
	}
	if err != nil {
		return err
	}
	if sum.Failed > 0 {
		return explain404(ctx, o.baseURL, o.model, fmt.Errorf("%d of %d requests failed; the first: %v", sum.Failed, len(samples), firstErr(samples)))
	}
	return nil
}

func firstErr(samples []sample) error {
	for _, s := range samples {
		if s.Err != nil {
			return s.Err
		}
	}
	return nil
}

// startPresetStack starts an in-process stack of the preset's engines: on
// loopback agents with its link and post cost, or on NIXL agents (native,
// build tag nixl). The func it returns stops the stack.
func startPresetStack(p preset, mode string, native bool, run string, adjust ...func(*stack.Config)) (*stack.Stack, func() error, error) {
	if err := checkMode(mode); err != nil {
		return nil, nil, err
	}
	cfg := stack.Config{Mode: mode, Model: p.Model, Compute: p.Compute, TPSize: p.TPSize, NumBlocks: p.NumBlocks, MaxBatch: p.MaxBatch,
		Lease: p.Lease, RequestTimeout: p.RequestTimeout, Replicas: p.Replicas}
	for _, f := range adjust {
		f(&cfg)
	}
	if native {
		newAgent, err := stack.NativeAgents("bench-" + run)
		if err != nil {
			return nil, nil, err
		}
		cfg.NewAgent = newAgent
		s, err := stack.Start(cfg)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}
	fab, err := loopback.NewFabric(loopback.WithModel(p.link()))
	if err != nil {
		return nil, nil, err
	}
	cost, block := p.postCost(), p.postBlockBytes()
	ranges := &stagingRanges{}
	cfg.NewAgent = func(name string) (nixl.Agent, error) {
		a, err := fab.NewAgent(name)
		if err != nil {
			return nil, err
		}
		return withPostCost(a, cost, block, ranges), nil
	}
	if mode == stack.ModePushStaged || mode == stack.ModePushProgressiveStaged {
		cfg.StagingCopier = gatherCostCopier{perBlock: p.gatherPerBlock(), blockBytes: p.rankBlockBytes()}
	}
	s, err := stack.Start(cfg)
	if err != nil {
		fab.Close()
		return nil, nil, err
	}
	for _, e := range []*server.Server{s.Prefill, s.Decode} {
		if e != nil { // collocated: one engine
			ranges.add(e.StagingMemory()...)
		}
	}
	return s, func() error { return errors.Join(s.Close(), fab.Close()) }, nil
}

func runSweep(ctx context.Context, o options, p preset, goal slo, pcts []float64, stdout, stderr io.Writer) error {
	if o.baseURL != "" {
		return fmt.Errorf("-sweep starts its own stacks: drop -base-url")
	}
	if o.resultDir == "" {
		return fmt.Errorf("-sweep needs -result-dir")
	}
	var err error
	if o.modes != "" {
		p.Modes = strings.Split(o.modes, ",")
		for _, m := range p.Modes {
			if err := checkMode(m); err != nil {
				return err
			}
			if m == stack.ModeCollocated && o.agents == "processes" {
				return fmt.Errorf("-agents processes runs split stacks only: drop collocated from -modes")
			}
			if (m == stack.ModePushStaged || m == stack.ModePushProgressiveStaged) && o.agents == "processes" {
				return fmt.Errorf("mode %q: the staged modes run in process only (the engine command has no staging flags): drop -agents processes", m)
			}
		}
	}
	if o.agents == "processes" && o.modes == "" && slices.Contains(p.Modes, stack.ModeCollocated) {
		fmt.Fprintln(stderr, "bench: -agents processes runs split stacks only: the sweep leaves out collocated")
	}
	if o.rates != "" {
		p.Rates = nil
		for _, f := range strings.Split(o.rates, ",") {
			r, err := parseRate(f)
			if err != nil || math.IsInf(r, 1) {
				return fmt.Errorf("-rates %q: want positive numbers", o.rates)
			}
			p.Rates = append(p.Rates, r)
		}
	}
	if o.inputLens != "" {
		p.InputLens = nil
		for _, f := range strings.Split(o.inputLens, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return fmt.Errorf("-input-lens %q: want positive integers", o.inputLens)
			}
			p.InputLens = append(p.InputLens, n)
		}
	}
	cmd := "go run ./examples/bench"
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		cmd += " " + a
	}
	sc := sweepConfig{Preset: p, Goodput: goal, Percentile: pcts, Seed: o.seed, ResultDir: o.resultDir,
		Machine: o.machine, Command: cmd, Progress: stderr, Log: stdout, Native: o.agents == "nixl"}
	if o.merge {
		base, err := readSweep(filepath.Join(o.resultDir, "sweep.json"))
		if err != nil {
			return fmt.Errorf("-merge: %w", err)
		}
		if base.Preset != p.Name || base.Goodput != goal.String() {
			return fmt.Errorf("-merge: %s is a sweep of preset %q with goodput %q; this one is %q with %q", filepath.Join(o.resultDir, "sweep.json"),
				base.Preset, base.Goodput, p.Name, goal.String())
		}
		sc.Base = &base
	}
	if o.agents == "processes" {
		bins := stack.Programs{Engine: o.engineBin, Proxy: o.proxyBin}
		if bins.Engine == "" || bins.Proxy == "" {
			dir, err := os.MkdirTemp("", "gonixl-bench-bin")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			built, err := stack.BuildPrograms(ctx, dir)
			if err != nil {
				return err
			}
			if bins.Engine == "" {
				bins.Engine = built.Engine
			}
			if bins.Proxy == "" {
				bins.Proxy = built.Proxy
			}
		}
		sc.Processes = &bins
	}
	res, err := sweep(ctx, sc)
	if len(res.Points) > 0 {
		files, perr := writePlots(res, o.resultDir)
		for _, f := range files {
			fmt.Fprintln(stdout, "plot:", f)
		}
		if perr != nil && err == nil {
			err = perr
		}
		printRatios(stdout, res)
	}
	return err
}

// printRatios prints, at every point, the modes' mean TTFT, push's mean
// TTFT over pull's and pull-inline's, the modes' mean TPOT and goodput, and
// push's and pull's goodput over collocated's; "-" where the sweep has no
// such point (a mode left out by -modes, or a point that did not run) or no
// goodput SLO.
func printRatios(w io.Writer, r sweepResult) {
	modes := []string{"pull", "pull-inline", "push", stack.ModeCollocated}
	head := []string{"input", "rate", "pull TTFT", "inline", "push", "coll", "push/pull", "push/inline",
		"pull TPOT", "inline", "push", "coll", "pull good", "inline", "push", "coll", "pull/coll", "push/coll", "prog TTFT", "prog/push", "layers TTFT", "layers/push"}
	widths := []int{-7, -5, 10, 9, 9, 9, 10, 12, 10, 8, 8, 8, 10, 7, 7, 7, 10, 10, 10, 10, 11, 11}
	row := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				fmt.Fprint(w, " ")
			}
			fmt.Fprintf(w, "%*s", widths[i], c)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	row(head)
	for _, n := range r.InputLens {
		for _, rate := range r.Rates {
			var pts [4]*point
			for i, m := range modes {
				if pt, ok := r.lookup(m, rate, n); ok {
					pts[i] = &pt
				}
			}
			metric := func(pt *point, key, format string) string {
				if pt == nil {
					return "-"
				}
				v, has := pt.Metrics[key]
				if !has {
					return "-"
				}
				return fmt.Sprintf(format, v)
			}
			good := func(pt *point) (float64, bool) {
				if pt == nil || pt.RequestGoodput == nil {
					return 0, false
				}
				return *pt.RequestGoodput, true
			}
			ratio := func(a, b float64, okA, okB bool) string {
				if !okA || !okB || b == 0 {
					return "-"
				}
				return fmt.Sprintf("%.2f", a/b)
			}
			ttft := func(pt *point) (float64, bool) {
				if pt == nil {
					return 0, false
				}
				v, ok := pt.Metrics["mean_ttft_ms"]
				return v, ok
			}
			cells := []string{fmt.Sprint(n), fmt.Sprint(rate)}
			for _, pt := range pts {
				cells = append(cells, metric(pt, "mean_ttft_ms", "%.1f"))
			}
			pushT, okPush := ttft(pts[2])
			for _, base := range []*point{pts[0], pts[1]} {
				b, ok := ttft(base)
				cells = append(cells, ratio(pushT, b, okPush, ok))
			}
			for _, pt := range pts {
				cells = append(cells, metric(pt, "mean_tpot_ms", "%.2f"))
			}
			for _, pt := range pts {
				g, ok := good(pt)
				cells = append(cells, ratio(g, 1, ok, true))
			}
			coll, okColl := good(pts[3])
			for _, split := range []*point{pts[0], pts[2]} {
				g, ok := good(split)
				cells = append(cells, ratio(g, coll, ok, okColl))
			}
			// Progressive push (stack.ModePushProgressive), and per layer
			// (stack.ModePushProgressiveLayers), beside push.
			for _, mode := range []string{stack.ModePushProgressive, stack.ModePushProgressiveLayers} {
				var prog *point
				if pt, ok := r.lookup(mode, rate, n); ok {
					prog = &pt
				}
				progT, okProg := ttft(prog)
				cells = append(cells, metric(prog, "mean_ttft_ms", "%.1f"), ratio(progT, pushT, okProg, okPush))
			}
			row(cells)
		}
	}
}

// replot redraws a finished sweep's plots from its JSON.
func replot(path string, stdout io.Writer) error {
	res, err := readSweep(path)
	if err != nil {
		return err
	}
	files, err := writePlots(res, filepath.Dir(path))
	for _, f := range files {
		fmt.Fprintln(stdout, "plot:", f)
	}
	if err != nil {
		return err
	}
	printRatios(stdout, res)
	return nil
}

// readSweep reads a sweep's JSON file.
func readSweep(path string) (sweepResult, error) {
	var res sweepResult
	b, err := os.ReadFile(path)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

// checkMode accepts a split mode or collocated.
func checkMode(mode string) error {
	if mode == stack.ModeCollocated {
		return nil
	}
	if _, _, err := stack.ConnectorOf(mode); err != nil {
		return fmt.Errorf("mode %q: want pull, pull-inline, push, push-progressive, push-progressive-layers, push-staged, push-progressive-staged or collocated", mode)
	}
	return nil
}

// engineURLs are the stack's engines' base URLs: prefill and decode, or the
// collocated replicas.
func engineURLs(s *stack.Stack) []string {
	var urls []string
	for _, e := range s.Engines {
		urls = append(urls, e.URL())
	}
	return urls
}
