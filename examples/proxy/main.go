// Command proxy is the P/D proxy of the reference disaggregated serving stack: clients send
// OpenAI-style completion requests to it, and it splits each into a prefill leg and a
// decode leg over the engines given with -prefill and -decode (see package pd), or over
// every engine registered in etcd with -etcd (see package examples/discovery).
//
//	go run ./examples/proxy -prefill 127.0.0.1:8100 -decode 127.0.0.1:8200
//	go run ./examples/proxy -etcd 127.0.0.1:2379 -connector pull
//	curl -s localhost:8192/v1/completions -d '{"model":"toy","prompt":"hello","max_tokens":8}'
//	curl -s localhost:8192/metrics
//
// Started before its engines, it waits for them (-wait-engines, logged) instead of exiting.
package main

import (
	"context"
	"errors"
	"flag"

	"fmt"
	"github.com/gonixl/gonixl/examples/render/chat"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/examples/otlp"
	"github.com/gonixl/gonixl/examples/proxy/pd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], nil); err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully; ready, if not nil, gets the
// address it listens on.
func run(ctx context.Context, args []string, ready func(addr string)) error {
	flags := flag.NewFlagSet("proxy", flag.ContinueOnError)
	port := flags.Int("port", 8192, "port to listen on")
	host := flags.String("host", "127.0.0.1", "address to listen on")
	prefill := flags.String("prefill", "", "prefill engines, host:port,... (or http:// URLs)")
	decode := flags.String("decode", "", "decode engines, host:port,... (or http:// URLs)")
	connector := flags.String("connector", "", `"pull" or "push"; empty: ask the engines (GET /kv_transfer_info), or "pull" with -etcd alone`)
	policy := flags.String("policy", pd.PolicyRoundRobin, `"round_robin" or "least_outstanding"`)
	timeout := flags.Duration("request-timeout", 120*time.Second, "limit of each leg")
	health := flags.Duration("health-interval", 2*time.Second, "period of the engines' health checks")
	healthFailures := flags.Int("health-failures", pd.DefaultHealthFailures, "health checks in a row an engine must fail to leave rotation (one that passes brings it back)")
	wait := flags.Duration("wait-engines", time.Minute, "how long to wait at start for a prefill and a decode engine of -prefill and -decode (0: no wait)")
	etcdEndpoints := flags.String("etcd", "", "etcd endpoints, host:port,...: route across the engines registered there")
	cluster := flags.String("cluster", "default", "with -etcd: the cluster name in the key /gonixl/<cluster>/engines/...")
	etcdTimeout := flags.Duration("etcd-timeout", 10*time.Second, "with -etcd: how long etcd may take to answer at start")
	bidir := flags.Bool("bidirectional-kv-xfer", false, "pull chats: send a conversation's next turn to the engines that hold its history, for prefill to read it back (the engines need -bidirectional-kv-xfer too)")
	render := flags.String("render", "", "render servers, host:port,... (examples/render): chat completions go render, P/D on token ids (engines with -tokens-only), derender")
	renderLocal := flags.Bool("render-local-stream", true, "with -render: derender streams in the proxy with the default chat pipeline (work per chunk in proportion to its tokens; the render servers must run the default pipeline); false: each chunk goes to a render server's stateless streaming derender (vLLM's, which replays the history)")
	debug := flags.Bool("debug", false, "debug logs")
	otlpEndpoint := flags.String("otlp-endpoint", "", otlp.FlagUsage)
	if err := flags.Parse(args); err != nil {
		return err
	}
	dynamic := *etcdEndpoints != ""
	if dynamic {
		set := map[string]bool{}
		flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["policy"] {
			*policy = pd.PolicyLeastOutstanding // engines differ in load; pull's decode is least outstanding anyway
		}
		if *connector == "" && *prefill == "" && *decode == "" {
			*connector = pd.ConnectorPull
		}
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flags.Args())
	}

	log, err := logConfig(*debug).Build()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	tracing, err := otlp.Start(ctx, *otlpEndpoint, "gonixl-proxy")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			log.Warn("exporting the last spans", zap.Error(err))
		}
	}()
	var pipeline *chat.Pipeline
	if *render != "" && *renderLocal {
		if pipeline, err = chat.New(chat.Config{}); err != nil {
			return err
		}
	}
	p, err := pd.NewContext(ctx, pd.Config{
		Render:         split(*render),
		RenderPipeline: pipeline,
		Prefill:        split(*prefill),
		Decode:         split(*decode),
		Connector:      *connector,
		Policy:         *policy,
		RequestTimeout: *timeout,
		HealthInterval: *health,
		HealthFailures: *healthFailures,
		StartWait:      *wait,
		Dynamic:        dynamic,
		Logger:         log,
		Bidirectional:  *bidir,
		TracerProvider: tracing.Provider,
	})
	if err != nil {
		return err
	}
	defer p.Close()
	if dynamic {
		stopFollowing, err := followRegistry(p, *etcdEndpoints, *cluster, *etcdTimeout, log)
		if err != nil {
			return err
		}
		defer stopFollowing()
	}

	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	srv := &http.Server{Addr: addr, Handler: p, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Info("listening", zap.String("addr", ln.Addr().String()), zap.String("connector", p.Connector()))

	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s := p.Stats()
	log.Info("stopped", zap.Uint64("requests", s.Requests), zap.Uint64("retried", s.Retried), zap.Uint64("decode_failovers", s.DecodeFailovers),
		zap.Uint64("failed", s.Failed), zap.Uint64("client_cancelled", s.ClientCancelled))
	return nil
}

// logConfig is the proxy's logger: JSON lines on stderr, no stack traces (an error the
// proxy logs names its cause; a stack of the proxy's own code tells an operator nothing
// and turns one line into twenty).
func logConfig(debug bool) zap.Config {
	zcfg := zap.NewProductionConfig()
	zcfg.DisableStacktrace = true
	if debug {
		zcfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	return zcfg
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
