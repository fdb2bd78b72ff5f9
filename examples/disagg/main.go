// Command disagg is the main job: it runs the reference serving stack in one
// process — one prefill engine and one decode engine (examples/engine), TP 2
// each, and the P/D proxy (examples/proxy), all on 127.0.0.1 over real HTTP
// — and sends a short batch of streaming completions through the proxy for
// pull, pull with READs posted on the engine loop (vLLM today) and push. Per
// mode it prints the requests done, the KV bytes verified on decode and the
// time to first token and per output token the client saw.
//
// Without the nixl build tag the agents are loopback agents on a modeled
// link (so the engines share this process); with -tags nixl they are NIXL
// agents over UCX. -serve keeps one stack running, the proxy on
// 127.0.0.1:8192, for other clients.
//
//	go run ./examples/disagg
//	go run ./examples/disagg -serve -connector push
//	go run ./examples/disagg -turns 3 -requests 8
//	go run ./examples/disagg -kv-layout NHD -decode-kv-layout HND
//	go run ./examples/disagg -render
//
// -kv-layout NHD gives both engines token-major KV blocks (vLLM's LBNHC),
// -decode-kv-layout the decode engine another order than prefill's: the
// connectors permute between them, and decode verifies every byte.
//
// -render sends chat completions through the render tier instead (render,
// P/D on token ids with tokens-only engines, derender; render.go) and
// compares them with engines that run the chat pipeline in process.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/render/chat"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// demoModel is a small KV geometry so the demo fills and verifies real
// bytes quickly: 4 layers, 4 KV heads of 64 bf16 values, 16-token blocks.
var demoModel = server.ModelSpec{Name: "demo-4l", Layers: 4, KVHeads: 4, HeadDim: 64, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 2}

// demoCompute is a compute model of the order of a small model on one GPU:
// prefill 2 ms + 10 µs per token, a decode step 4 ms + 50 µs per sequence.
var demoCompute = server.ComputeModel{PrefillBase: 2 * time.Millisecond, PrefillPerToken: 10 * time.Microsecond,
	DecodeBase: 4 * time.Millisecond, DecodePerSeq: 50 * time.Microsecond}

type options struct {
	model       string
	modes       []string
	requests    int
	rate        float64
	promptWords int
	maxTokens   int
	link        string
	serve       bool
	connector   string
	served      string
	port        int
	turns       int
	prefillPP   int
	// kvLayout is both engines' KV block order ("HND" or "NHD"),
	// decodeKVLayout the decode engine's where it differs.
	kvLayout, decodeKVLayout string
	// render runs chat completions through the render tier (render.go).
	render bool
	out    io.Writer
}

func main() {
	var o options
	modes := flag.String("modes", "pull,pull-inline,push", "modes to run, in order")
	flag.StringVar(&o.model, "model", demoModel.Name, "model shape: demo-4l (full attention), swa-demo (full + sliding-window layers) or hybrid-demo (attention + Mamba2 state)")
	flag.IntVar(&o.requests, "requests", 32, "requests per mode")
	flag.Float64Var(&o.rate, "rate", 16, "Poisson arrival rate, requests per second (0: all at once)")
	flag.IntVar(&o.promptWords, "prompt-tokens", 512, "prompt length in tokens (one word each)")
	flag.IntVar(&o.maxTokens, "max-tokens", 32, "output tokens per request")
	flag.StringVar(&o.link, "link", "modeled", `loopback link: "instant" or "modeled" (2 GB/s per link + 50us)`)
	flag.BoolVar(&o.serve, "serve", false, "keep one stack running (proxy on 127.0.0.1:-port) until interrupted")
	flag.StringVar(&o.connector, "connector", "pull", "-serve: pull, pull-inline or push")
	flag.StringVar(&o.served, "served-model-name", "", "the model name clients send (vLLM's flag; default: -model)")
	flag.IntVar(&o.port, "port", 8192, "-serve: the proxy's port")
	flag.IntVar(&o.turns, "turns", 0, "run chat conversations of this many turns (-requests of them, -prompt-tokens new words a turn) with bidirectional KV (pull), and without, instead of -modes")
	flag.IntVar(&o.prefillPP, "prefill-pp", 1, "the prefill engine's pipeline-parallel size (push only; with more than 1 and no -modes, only push runs)")
	flag.StringVar(&o.kvLayout, "kv-layout", "HND", `both engines' KV block order: "HND" (head-major) or "NHD" (token-major, vLLM's LBNHC)`)
	flag.StringVar(&o.decodeKVLayout, "decode-kv-layout", "", "the decode engine's KV block order, where it differs from -kv-layout (the connectors permute)")
	flag.BoolVar(&o.render, "render", false, "chat completions through the render tier: a render server renders and derenders, the engines run tokens-only (P/D on token ids); compared with engines that run the chat pipeline in process")
	flag.Parse()
	o.modes = strings.Split(*modes, ",")
	if o.served == "" {
		o.served = o.model
	}
	if o.prefillPP > 1 && !flagSet("modes") {
		o.modes = []string{"push"} // pull refuses a pipeline-parallel prefill
	}
	o.out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "disagg:", err)
		os.Exit(1)
	}
}

func (o options) stackConfig(mode string) (stackConfig, error) {
	model, compute, err := modelOf(o.model)
	if err != nil {
		return stackConfig{}, err
	}
	cfg := stackConfig{Mode: mode, Model: model, Compute: compute, ServedModelName: o.served, TPSize: 2, PrefillPPSize: o.prefillPP, NumBlocks: 4096,
		KVLayout: o.kvLayout, DecodeKVLayout: o.decodeKVLayout}
	switch o.link {
	case "instant":
		cfg.Link = loopback.Instant()
	case "modeled":
		cfg.Link = loopback.Bandwidth(2e9, 50*time.Microsecond)
	default:
		return cfg, fmt.Errorf(`-link is %q, want "instant" or "modeled"`, o.link)
	}
	return cfg, nil
}

func run(ctx context.Context, o options) error {
	if o.serve {
		return serve(ctx, o)
	}
	if o.turns > 0 {
		return runTurns(ctx, o)
	}
	if o.render {
		if !flagSet("max-tokens") {
			o.maxTokens = 64 // the demo replies end before: finish_reason "stop"
		}
		return runRender(ctx, o)
	}
	type row struct {
		mode     string
		done     int
		verified uint64
		bad      uint64
		ttft     []time.Duration
		tpot     []time.Duration
		firstErr error
	}
	var rows []row
	kind := ""
	for _, mode := range o.modes {
		cfg, err := o.stackConfig(mode)
		if err != nil {
			return err
		}
		s, err := startStack(cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		kind = s.agentKind
		// One request first: handshakes and connections are not what the
		// table measures.
		warm := load(ctx, s.url(), o.served, 1, 0, 8, 2, 99)
		r := row{mode: mode}
		if warm[0].err != nil {
			r.firstErr = fmt.Errorf("warm-up: %w", warm[0].err)
		}
		before := s.Decode.Stats()
		for _, smp := range load(ctx, s.url(), o.served, o.requests, o.rate, o.promptWords, o.maxTokens, 1) {
			if smp.err != nil {
				if r.firstErr == nil {
					r.firstErr = smp.err
				}
				continue
			}
			r.done++
			r.ttft = append(r.ttft, smp.ttft)
			r.tpot = append(r.tpot, smp.tpot)
		}
		after := s.Decode.Stats()
		r.verified = after.KVBytesVerified - before.KVBytesVerified
		r.bad = after.KVVerifyFailures - before.KVVerifyFailures
		rows = append(rows, r)
		if err := s.close(); err != nil {
			return fmt.Errorf("%s: close: %w", mode, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	agentsText := kind
	if kind == "loopback" {
		agentsText += " (link " + o.link + ")"
	}
	shape := "TP 2 each"
	if o.prefillPP > 1 {
		shape = fmt.Sprintf("prefill PP %d x TP 2, decode TP 2", o.prefillPP)
	}
	fmt.Fprintf(o.out, "proxy -> 1 prefill + 1 decode engine (%s, model %s%s), agents: %s; %d streaming requests per mode at %g/s, %d prompt tokens, %d output tokens\n\n",
		shape, o.model, o.layoutText(), agentsText, o.requests, o.rate, o.promptWords, o.maxTokens)
	tw := tabwriter.NewWriter(o.out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tdone\tKV bytes verified\tKV mismatches\tTTFT p50\tTTFT p99\tTPOT p50\tTPOT p99\t")
	var errs []error
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%d\t%v\t%v\t%v\t%v\t\n", r.mode, r.done, o.requests, r.verified, r.bad,
			ms(percentile(r.ttft, 50)), ms(percentile(r.ttft, 99)), ms(percentile(r.tpot, 50)), ms(percentile(r.tpot, 99)))
		if r.firstErr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.mode, r.firstErr))
		}
		if r.bad > 0 {
			errs = append(errs, fmt.Errorf("%s: %d KV mismatches on decode", r.mode, r.bad))
		}
	}
	tw.Flush()
	fmt.Fprintln(o.out, "\nThe same stack as three processes (NIXL agents: -tags nixl; loopback agents cannot cross processes):")
	conn := "pull"
	if o.prefillPP > 1 {
		conn = "push"
	}
	for i, c := range threeCommands(conn, o.model, o.prefillPP) {
		fmt.Fprintln(o.out, "  "+c+o.layoutFlag(i))
	}
	return errors.Join(errs...)
}

// layouts returns the prefill and decode engines' KV block orders.
func (o options) layouts() (prefill, decode string) {
	prefill = descriptors.OrderOf(o.kvLayout)
	return prefill, cmp.Or(o.decodeKVLayout, prefill)
}

// layoutText names the block orders in the header when one is not HND.
func (o options) layoutText() string {
	p, d := o.layouts()
	switch {
	case p == descriptors.OrderHND && d == descriptors.OrderHND:
		return ""
	case p == d:
		return ", KV layout " + p
	}
	return ", KV layout " + p + " on prefill, " + d + " on decode"
}

// layoutFlag is the engine's -kv-layout for command i of threeCommands
// (0 prefill, 1 decode), where it is not the default.
func (o options) layoutFlag(i int) string {
	p, d := o.layouts()
	l := map[int]string{0: p, 1: d}[i]
	if l == "" || l == descriptors.OrderHND {
		return ""
	}
	return " -kv-layout " + l
}

func ms(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }

// serve runs one stack with the proxy on 127.0.0.1:port until ctx ends.
func serve(ctx context.Context, o options) error {
	cfg, err := o.stackConfig(o.connector)
	if err != nil {
		return err
	}
	cfg.ProxyAddr = fmt.Sprintf("127.0.0.1:%d", o.port)
	if o.render {
		pipe, err := chat.New(chat.Config{})
		if err != nil {
			return err
		}
		cfg.Render, cfg.Chat, cfg.Replies = true, pipe, server.ReplyScript(pipe, server.DemoReplyTexts)
	}
	// The engines and the stack log their shutdown steps (what they wait
	// for, how long) at Info: a stack that takes a while to stop says why.
	logger := serveLogger(o.out)
	defer func() { _ = logger.Sync() }()
	cfg.Logger = logger
	s, err := startStack(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.out, "serving %s on %s (model %q; prefill %s, decode %s); Ctrl-C to stop\n", o.connector, s.url(), o.served, s.Prefill.URL(), s.Decode.URL())
	fmt.Fprintf(o.out, "  curl -s %s/v1/completions -H 'Content-Type: application/json' -d '{\"model\":%q,\"prompt\":\"hello world\",\"max_tokens\":8}'\n", s.url(), o.served)
	<-ctx.Done()
	// A second Ctrl-C forces the exit: the first one ended ctx, so
	// NotifyContext no longer sees signals.
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	fmt.Fprintln(o.out, "stopping the stack (Ctrl-C again to exit at once)")
	done := make(chan error, 1)
	go func() { done <- s.close() }()
	select {
	case err := <-done:
		return err
	case <-again:
		fmt.Fprintln(o.out, "second signal: exiting without waiting for the stack")
		os.Exit(1)
		return nil
	}
}

// serveLogger logs Info and above to w, one line an entry, as a person
// watching the terminal reads it.
func serveLogger(w io.Writer) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.TimeKey, enc.CallerKey, enc.StacktraceKey = "", "", ""
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), zapcore.InfoLevel))
}

// threeCommands are the command lines that run the demo's stack as three
// processes; prefillPP > 1 runs the prefill engine in that many pipeline
// stages.
func threeCommands(connector, preset string, prefillPP int) []string {
	model := fmt.Sprintf("-model qwen2.5-7b -layers %d -kv-heads %d -head-dim %d -tp %d -served-model-name %s",
		demoModel.Layers, demoModel.KVHeads, demoModel.HeadDim, demoModel.TPSize, demoModel.Name)
	if preset != "" && preset != demoModel.Name {
		model = "-model " + preset // the engine's preset of the same name
	}
	pp := ""
	if prefillPP > 1 {
		pp = fmt.Sprintf(" -pp %d", prefillPP)
	}
	return []string{
		fmt.Sprintf("go run -tags nixl ./examples/engine -role prefill -connector %s %s%s -port 8100 -side-channel-port 5600", connector, model, pp),
		fmt.Sprintf("go run -tags nixl ./examples/engine -role decode -connector %s %s -port 8200 -side-channel-port 5601", connector, model),
		"go run ./examples/proxy -prefill 127.0.0.1:8100 -decode 127.0.0.1:8200 -port 8192",
	}
}

// flagSet reports whether the command line set flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
