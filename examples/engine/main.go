// Command engine runs one simulated inference engine of a disaggregated
// serving stack: vLLM's OpenAI HTTP API (/v1/completions, /v1/models,
// /health, /metrics) and /kv_transfer_info, a modeled compute time and a real
// KV cache moved by gonixl's pull or push connector, one NIXL agent per TP
// rank.
//
//	# prefill and decode engines, pull connector (vLLM's NixlConnector)
//	go run -tags nixl ./examples/engine -role prefill -port 8100 -side-channel-port 5600
//	go run -tags nixl ./examples/engine -role decode -port 8200 -side-channel-port 5601
//	# or vLLM's spelling
//	go run -tags nixl ./examples/engine --port 8100 \
//	    --kv-transfer-config '{"kv_connector":"NixlPushConnector","kv_role":"kv_producer"}'
//
// Engines in separate processes need native NIXL agents (build tag nixl);
// without it the engine uses an in-process loopback agent, which serves
// requests without kv_transfer_params only (a baseline). The side channel
// defaults to $VLLM_NIXL_SIDE_CHANNEL_HOST:$VLLM_NIXL_SIDE_CHANNEL_PORT
// (127.0.0.1:5600; with -protocol vllm, localhost resolved to an address, as
// a vLLM instance binds it), plus -data-parallel-rank on the port as vLLM
// adds its data-parallel index. SIGTERM or SIGINT shuts down gracefully: no new
// requests, in-flight ones drain within -drain-timeout, a prefill's blocks
// held for decode wait at most -hold-drain to be read (with pull, those no
// decode engine asked about for a second are dropped at once, and decode
// engines that come for a dropped hold are told), then every block is
// released; each wait is logged with its count and bound. A second signal
// exits at once.
//
// With -etcd host:port,... the engine registers itself under
// /gonixl/<-cluster>/engines/<role>/<engine_id> (package
// examples/discovery) on a lease of -etcd-ttl kept alive while it runs, so
// that a proxy started with -etcd finds it; the key is deleted first on a
// graceful shutdown, and vanishes with the lease when the engine is killed.
// An engine with loopback agents refuses -etcd at start: engines in other
// processes could not move its KV, and every request routed to it would fail.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gonixl/gonixl/examples/discovery"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/otlp"
	"github.com/gonixl/gonixl/examples/render/chat"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func run(args []string) error {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	role := fs.String("role", "prefill", `"prefill" (kv_producer) or "decode" (kv_consumer)`)
	connector := fs.String("connector", "pull", `"pull" (NixlConnector) or "push" (NixlPushConnector)`)
	kvConfig := fs.String("kv-transfer-config", "", `vLLM's JSON, e.g. {"kv_connector":"NixlConnector","kv_role":"kv_consumer"}; sets -role and -connector`)
	inline := fs.Bool("inline", false, "pull decode: post READs on the engine loop, as vLLM does today")
	protocol := fs.String("protocol", server.ProtocolGonixl, `"gonixl" or "vllm": vLLM's NIXL connectors (versions 12 to 16, pull and push), to pair with vLLM instances (docs/vllm.md)`)
	vllmVersion := fs.String("vllm-version", "", "-protocol vllm: the vLLM peers' version string (vllm.__version__), for the compatibility hash")
	connectorVersion := fs.Int("vllm-connector-version", 0, "-protocol vllm: the vLLM peers' NIXL_CONNECTOR_VERSION, 12 to 16 (0: the one -vllm-version's release speaks, else 16)")
	attnBackend := fs.String("attn-backend", "FLASH_ATTN", "-protocol vllm: the vLLM peers' attention backend name, for the compatibility hash")
	vllmModel := fs.String("vllm-model", "", "-protocol vllm: the model string the vLLM peers run (their --model), for the compatibility hash (default: the preset's name)")
	engineID := fs.String("engine-id", "", "engine id (default: role + random hex)")
	preset := fs.String("model", "qwen2.5-7b", "model preset: qwen3-32b, llama-3.1-70b, qwen2.5-7b; grouped (gonixl protocol): swa-demo, hybrid-demo")
	served := fs.String("served-model-name", "", "the model name requests use (default: the preset's)")
	layers := fs.Int("layers", 0, "override the preset's layer count")
	kvHeads := fs.Int("kv-heads", 0, "override the preset's KV head count")
	headDim := fs.Int("head-dim", 0, "override the preset's head dimension")
	blockSize := fs.Int("block-size", 0, "override the KV block size in tokens")
	kvLayout := fs.String("kv-layout", "HND", `KV block order: "HND" (head-major) or "NHD" (token-major, vLLM's LBNHC; gonixl's protocol only). Engines of different orders pair: the connectors permute`)
	tp := fs.Int("tensor-parallel-size", 0, "TP size (default: the preset's)")
	fs.IntVar(tp, "tp", 0, "short for -tensor-parallel-size")
	pp := fs.Int("pipeline-parallel-size", 1, "PP size: stages of TP ranks, each holding its share of the layers (prefill with -connector push only)")
	fs.IntVar(pp, "pp", 1, "short for -pipeline-parallel-size")
	numBlocks := fs.Int("num-blocks", server.DefaultNumBlocks, "KV blocks per rank")
	noCompute := fs.Bool("no-compute", false, "do not sleep for modeled compute")
	computeScale := fs.Float64("compute-scale", 1, "scale the preset's compute times")
	host := fs.String("host", "127.0.0.1", "HTTP listen host")
	port := fs.Int("port", 8000, "HTTP listen port (0: any)")
	sideHost := fs.String("side-channel-host", envOr("VLLM_NIXL_SIDE_CHANNEL_HOST", ""), `side channel host ($VLLM_NIXL_SIDE_CHANNEL_HOST; default 127.0.0.1, with -protocol vllm vLLM's "localhost", resolved to an address)`)
	sidePortS := fs.String("side-channel-port", envOr("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600"), "side channel base port ($VLLM_NIXL_SIDE_CHANNEL_PORT; the engine listens on it + -data-parallel-rank, as vLLM does)")
	dpRank := fs.Int("data-parallel-rank", 0, "this engine's data-parallel index, added to -side-channel-port as vLLM adds it")
	maxBatch := fs.Int("max-num-seqs", server.DefaultMaxBatch, "decode batch size limit")
	progressLayers := fs.Bool("progress-layers", false, "push prefill: report progress after each layer of each chunk (of -progress-chunk; 0: the prompt is one chunk), the blocks final in the layers done (per-layer progressive push)")
	progressChunk := fs.Int("progress-chunk", 0, "push prefill: compute prompts in chunks of this many tokens and report each chunk's final blocks to the connector, which moves them while the next computes (progressive push; 0: off)")
	reqTimeout := fs.Duration("request-timeout", server.DefaultRequestTimeout, "bound on a request's waits (blocks, KV)")
	policy := fs.String("kv-load-failure-policy", "fail", `decode: "fail" (answer 500) or "recompute" (prefill locally)`)
	lease := fs.Duration("lease", 0, "prefill: how long finished blocks wait for decode (default: the connector's, 30s)")
	tokensOnly := fs.Bool("tokens-only", false, "vLLM's --tokens-only: serve POST /inference/v1/generate (token ids in and out) and refuse text (chat requests, text prompts, stop strings), as a vLLM engine behind a render server")
	chatPipeline := fs.Bool("chat-pipeline", false, "run the render tier's default chat pipeline (examples/render/chat: Qwen3-style template, cl100k tokenizer, qwen3 reasoning and hermes tool-call parsers) in process for /v1/chat/completions, as vllm serve without --tokens-only")
	demoReplies := fs.Bool("demo-replies", false, "answer from the demo reply script (reasoning, a tool call, a plain answer; tokenized by the default chat pipeline) instead of tokens from the KV checksum alone")
	vocabSize := fs.Int("vocab-size", 0, "the largest token id + 1 requests may carry (0: the default chat pipeline's vocabulary with -tokens-only, -chat-pipeline or -demo-replies, else 32000)")
	bidir := fs.Bool("bidirectional-kv-xfer", false, "pull: bidirectional KV for multi-turn chats (vLLM's bidirectional_kv_xfer): decode holds a finished turn for the next, prefill reads it back")
	recompute := fs.Int("kv-recompute-threshold", 0, "with -bidirectional-kv-xfer, prefill: the least history tokens read back rather than recomputed (default 64, vLLM's)")
	histTTL := fs.Duration("decoder-kv-blocks-ttl", 0, "with -bidirectional-kv-xfer, decode: how long a finished turn's blocks wait for the next turn (default 480s, vLLM's)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM: how long the whole shutdown may take (in-flight requests, then held blocks)")
	holdDrain := fs.Duration("hold-drain", server.DefaultHoldDrain, "on SIGTERM, prefill: how long blocks held for decode may wait to be read, within -drain-timeout (negative: release at once)")
	agentKind := fs.String("agent", "auto", `"nixl" (needs -tags nixl), "loopback" (in-process: local requests only) or "auto"`)
	backend := fs.String("nixl-backend", "UCX", "NIXL backend plugin (UCX, LIBFABRIC)")
	backendParams := fs.String("nixl-backend-params", "", `backend parameters, key=value,... (default: none, so NIXL's own defaults, as a vLLM engine creates its UCX backend; the UCX error handling mode must be the same on both engines of a pair: ucx_error_handling_mode=none only where every peer sets it too)`)
	logLevel := fs.String("log-level", "info", "debug, info, warn, error")
	connLog := fs.Bool("connector-log", true, `log the connectors' warnings and "KV Transfer metrics:" lines`)
	etcdEndpoints := fs.String("etcd", "", "etcd endpoints, host:port,...: register this engine there (see package examples/discovery)")
	cluster := fs.String("cluster", "default", "with -etcd: the cluster name in the key /gonixl/<cluster>/engines/...")
	etcdTTL := fs.Duration("etcd-ttl", discovery.DefaultTTL, "with -etcd: the registration's lease TTL (whole seconds)")
	etcdTimeout := fs.Duration("etcd-timeout", 10*time.Second, "with -etcd: how long etcd may take to answer at start")
	otlpEndpoint := fs.String("otlp-endpoint", "", otlp.FlagUsage)
	telemetry := fs.Bool("nixl-telemetry", true, "-agent nixl: create the agents with NIXL's per-transfer telemetry (captureTelemetry, as vLLM does), which then times the transfer and post histograms (docs/metrics.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kvConfig != "" {
		var kc struct {
			Connector string `json:"kv_connector"`
			Role      string `json:"kv_role"`
		}
		if err := json.Unmarshal([]byte(*kvConfig), &kc); err != nil {
			return fmt.Errorf("-kv-transfer-config: %w", err)
		}
		switch kc.Role {
		case "kv_producer":
			*role = server.RolePrefill
		case "kv_consumer":
			*role = server.RoleDecode
		default:
			return fmt.Errorf(`-kv-transfer-config: kv_role %q, want "kv_producer" or "kv_consumer"`, kc.Role)
		}
		switch kc.Connector {
		case "NixlConnector":
			*connector = server.ConnPull
		case "NixlPushConnector":
			*connector = server.ConnPush
		default:
			return fmt.Errorf(`-kv-transfer-config: kv_connector %q, want "NixlConnector" or "NixlPushConnector"`, kc.Connector)
		}
	}
	sidePort, err := parseSidePort(*sidePortS)
	if err != nil {
		return err
	}

	lvl, err := zapcore.ParseLevel(*logLevel)
	if err != nil {
		return err
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	log, err := zc.Build()
	if err != nil {
		return err
	}
	defer log.Sync()

	model, compute, ok := server.Preset(*preset)
	if !ok {
		return fmt.Errorf("-model %q: want qwen3-32b, llama-3.1-70b, qwen2.5-7b, swa-demo or hybrid-demo", *preset)
	}
	for _, o := range []struct {
		dst *int
		v   int
	}{{&model.Layers, *layers}, {&model.KVHeads, *kvHeads}, {&model.HeadDim, *headDim}, {&model.BlockSize, *blockSize}} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	if *noCompute {
		compute = server.ComputeModel{}
	} else if *computeScale != 1 {
		sc := func(d *time.Duration) { *d = time.Duration(float64(*d) * *computeScale) }
		for _, d := range []*time.Duration{&compute.PrefillBase, &compute.PrefillPerToken, &compute.PrefillPerToken2, &compute.DecodeBase, &compute.DecodePerSeq, &compute.DecodePerKToken} {
			sc(d)
		}
	}

	params, err := parseParams(*backendParams)
	if err != nil {
		return err
	}
	newAgent, kind, closeAgents, err := agentFactory(*agentKind, *backend, params, *telemetry, log)
	if err != nil {
		return err
	}
	defer closeAgents()
	if err := checkRegistrable(*etcdEndpoints, kind); err != nil {
		log.Error("not registering in etcd", zap.String("agents", kind.String()), zap.Error(err))
		return err
	}
	cfg := server.Config{Role: *role, Connector: *connector, Inline: *inline, EngineID: *engineID, ServedModelName: *served,
		Model: model, Compute: compute, TPSize: *tp, PPSize: *pp, NumBlocks: *numBlocks,
		HTTPAddr: net.JoinHostPort(*host, strconv.Itoa(*port)), SideChannelHost: *sideHost, SideChannelPort: sidePort, DataParallelIndex: *dpRank,
		NewAgent: newAgent, MaxBatch: *maxBatch, ProgressChunk: *progressChunk, ProgressLayers: *progressLayers, RequestTimeout: *reqTimeout, Logger: log,
		FailurePolicy: *policy, Lease: *lease,
		TokensOnly:    *tokensOnly,
		Bidirectional: *bidir, RecomputeThreshold: *recompute, HistoryTTL: *histTTL,
		Protocol: *protocol, VLLMVersion: *vllmVersion, VLLMConnectorVersion: *connectorVersion, AttentionBackend: *attnBackend, VLLMModel: *vllmModel, KVLayout: *kvLayout}
	if *connLog {
		cfg.ConnLogger = log.Named("kv")
	}
	cfg.VocabSize = *vocabSize
	if *chatPipeline || *demoReplies || *tokensOnly {
		pipe, err := chat.New(chat.Config{})
		if err != nil {
			return err
		}
		if *chatPipeline {
			cfg.Chat = pipe
		}
		if *demoReplies {
			cfg.Replies = server.ReplyScript(pipe, server.DemoReplyTexts)
		}
		if cfg.VocabSize == 0 {
			cfg.VocabSize = pipe.Tokenizer().VocabSize()
		}
	}
	tracing, err := otlp.Start(context.Background(), *otlpEndpoint, "gonixl-engine-"+*role)
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
	cfg.TracerProvider = tracing.Provider
	s, err := server.New(cfg)
	if err != nil {
		return err
	}
	info := s.Info()
	log.Info("ready", zap.String("url", s.URL()), zap.String("agents", kind.String()), zap.String("engine_id", info.EngineID),
		zap.String("role", info.Role), zap.String("connector", info.Connector), zap.String("model", info.Model), zap.Int("tp_size", info.TPSize), zap.Int("pp_size", info.PPSize),
		zap.String("side_channel", net.JoinHostPort(info.SideChannelHost, strconv.Itoa(info.SideChannelPort))))

	var deregister func(context.Context) error
	if *etcdEndpoints != "" {
		if deregister, err = register(s, *etcdEndpoints, *cluster, *etcdTTL, *etcdTimeout, log); err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return errors.Join(err, s.Close(cctx))
		}
	}

	// Take SIGINT and SIGTERM back before asking for them: loading NIXL's
	// LIBFABRIC plugin loads Debian's libfabric, whose libinfinipath (PSM)
	// installs its own SIGINT/SIGTERM handlers at load time (they exit 1 at
	// once), and signal.Notify re-installs Go's handler only for a signal
	// Go does not think it already handles; Ignore makes it not.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	sig := <-sigs
	log.Info("signal received: shutting down (a second signal forces exit)", zap.String("signal", sig.String()),
		zap.Duration("drain_timeout", *drain), zap.Duration("hold_drain", *holdDrain))
	dctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	go forceOnSecondSignal(sigs, log, os.Exit)
	if deregister != nil {
		// Leave the registry first, so that proxies stop sending new requests.
		if derr := deregister(dctx); derr != nil {
			log.Warn("leaving etcd", zap.Error(derr))
		}
	}
	err = s.Shutdown(dctx, server.ShutdownOptions{HoldDrain: *holdDrain})
	st := s.Stats()
	log.Info("stopped", zap.Uint64("requests_done", st.RequestsDone), zap.Uint64("requests_failed", st.RequestsFailed),
		zap.Uint64("kv_bytes_verified", st.KVBytesVerified), zap.Uint64("kv_verify_failures", st.KVVerifyFailures))
	return err
}

// forceOnSecondSignal exits the process, with status 1, on the next signal
// from sigs: the operator's Ctrl-C twice, when the graceful shutdown is not
// worth waiting for.
func forceOnSecondSignal(sigs <-chan os.Signal, log *zap.Logger, exit func(int)) {
	sig, ok := <-sigs
	if !ok {
		return
	}
	log.Warn("second signal: exiting now, without draining", zap.String("signal", sig.String()))
	_ = log.Sync()
	exit(1)
}

// register publishes the engine's record in etcd and returns how to
// withdraw it (delete the key, revoke the lease, close the client); timeout bounds
// the registration.
func register(s *server.Server, endpoints, cluster string, ttl, timeout time.Duration, log *zap.Logger) (func(context.Context) error, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: timeout, Logger: log.Named("etcd")})
	if err != nil {
		return nil, fmt.Errorf("-etcd %s: %w", endpoints, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec := s.Record()
	reg, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: cluster, Record: rec, TTL: ttl, Logger: log.Named("registry")})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("-etcd %s: %w", endpoints, err)
	}
	log.Info("registered in etcd", zap.String("key", reg.Key()), zap.Duration("ttl", ttl),
		zap.String("compat_hash", rec.CompatHash), zap.String("incarnation", rec.Incarnation))
	return func(ctx context.Context) error { return errors.Join(reg.Close(ctx), cli.Close()) }, nil
}

// agentKind is what agentFactory chose.
type agentKind struct {
	native  bool   // NIXL agents, which reach engines in other processes
	backend string // native: the NIXL backend
	// noNIXL: loopback because this build has no NIXL (no -tags nixl), as
	// opposed to -agent loopback asked for in a build that has it.
	noNIXL bool
}

func (k agentKind) String() string {
	if k.native {
		return "NIXL (" + k.backend + ")"
	}
	return "loopback (in-process)"
}

// checkRegistrable refuses -etcd for an engine whose agents are loopback
// agents: they move KV only between agents of one process, so a proxy that
// found the engine in etcd would pair it with engines in other processes and
// every disaggregated request would fail (a 502 saying the peer's metadata
// "was made on another fabric"). Better to stop at start and say why.
func checkRegistrable(etcdEndpoints string, k agentKind) error {
	if etcdEndpoints == "" || k.native {
		return nil
	}
	why := "-agent loopback chose in-process agents (use -agent nixl or auto)"
	if k.noNIXL {
		why = "this build has no NIXL: rebuild with -tags nixl (NIXL installed, docs/binding.md)"
	}
	return fmt.Errorf("-etcd %s: refusing to register: this engine's agents are loopback (in-process) agents, which cannot move KV to or from engines in other processes; %s, or drop -etcd to serve only requests without kv_transfer_params", etcdEndpoints, why)
}

// agentFactory returns how to make each rank's agent.
func agentFactory(kind, backend string, given map[string]string, telemetry bool, log *zap.Logger) (func(string) (nixl.Agent, error), agentKind, func(), error) {
	// Every start of the engine names its agents anew, as vLLM does (a uuid per agent):
	// peers holding the metadata of an earlier start's agents would refuse the new ones'
	// under the same name.
	start := randomHex()
	native := func(name string) (nixl.Agent, error) {
		name += "-" + start
		// LIBFABRIC makes progress only on NIXL's own progress thread.
		a, err := nixl.New(name, nixl.Config{ProgressThread: strings.EqualFold(backend, "LIBFABRIC"), CaptureTelemetry: telemetry})
		if err != nil {
			return nil, err
		}
		// No parameters unless given: NIXL's defaults, which is what a
		// vLLM engine asks for (its UCX error handling mode is NIXL's
		// default, "peer"), and UCX refuses endpoints whose modes differ.
		if err := a.CreateBackend(backend, given); err != nil {
			a.Close()
			return nil, fmt.Errorf("NIXL backend %s for %s: %w", backend, name, err)
		}
		return a, nil
	}
	loop := func(noNIXL bool) (func(string) (nixl.Agent, error), agentKind, func(), error) {
		fab, err := loopback.NewFabric()
		if err != nil {
			return nil, agentKind{}, nil, err
		}
		return func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }, agentKind{noNIXL: noNIXL}, func() { fab.Close() }, nil
	}
	nativeKind := agentKind{native: true, backend: backend}
	switch kind {
	case "nixl":
		return native, nativeKind, func() {}, nil
	case "loopback":
		// Only to say, if asked to register, whether this build has NIXL.
		probe, err := nixl.New(fmt.Sprintf("engine-probe-%d", os.Getpid()), nixl.Config{})
		if err == nil {
			probe.Close()
		}
		return loop(errors.Is(err, nixl.ErrUnavailable))
	case "auto":
		probe, err := nixl.New(fmt.Sprintf("engine-probe-%d", os.Getpid()), nixl.Config{})
		if errors.Is(err, nixl.ErrUnavailable) {
			log.Warn("NIXL unavailable in this build (-tags nixl): loopback agents serve local requests only", zap.Error(err))
			return loop(true)
		}
		if err == nil {
			probe.Close()
		}
		return native, nativeKind, func() {}, nil
	}
	return nil, agentKind{}, nil, fmt.Errorf(`-agent %q: want "nixl", "loopback" or "auto"`, kind)
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// parseParams reads -nixl-backend-params: "key=value,key=value"; empty
// means the backend's defaults (nil).
func parseParams(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-nixl-backend-params: %q is not key=value", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// parseSidePort reads -side-channel-port (or $VLLM_NIXL_SIDE_CHANNEL_PORT).
func parseSidePort(v string) (int, error) {
	p, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("-side-channel-port (or $VLLM_NIXL_SIDE_CHANNEL_PORT) is %q, want a port 0..65535 (vLLM's default is 5600)", v)
	}
	return p, nil
}
