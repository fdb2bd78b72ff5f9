package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/examples/render/chat"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Modes are the ways the stack can move KV: the pull connector with READs
// posted from its own goroutine, the pull connector with READs posted on the
// decode engine's loop (vLLM's NixlConnector today), and the push connector.
var Modes = []string{"pull", "pull-inline", "push"}

// ModePushProgressive is push with progress reports: the prefill engine
// computes prompts in chunks of Config.ProgressChunk tokens (chunked
// prefill) and the connector moves each chunk's final blocks while the
// next computes (connector.ProgressReporter).
const ModePushProgressive = "push-progressive"

// ModePushProgressiveLayers is ModePushProgressive reporting per layer as
// well (server.Config.ProgressLayers): after each layer of each chunk the
// chunk's blocks are reported final in the layers done, and the connector
// WRITEs those layers while the next layer computes.
const ModePushProgressiveLayers = "push-progressive-layers"

// ModePushStaged is push with staging on both engines
// (connector.StagingOn): a request's blocks are gathered into a staging
// slot and written as a few large runs, which decode scatters.
// ModePushProgressiveStaged is ModePushProgressive with the same staging:
// each progress report's blocks go as a staged part.
const (
	ModePushStaged            = "push-staged"
	ModePushProgressiveStaged = "push-progressive-staged"
)

// DefaultStagingSlots is the staging slots per rank of the staged modes.
const DefaultStagingSlots = 8

// DefaultProgressChunk is ModePushProgressive's chunk: vLLM's default
// token budget of a chunked-prefill step for online serving on large GPUs.
const DefaultProgressChunk = 2048

// Config is what one stack runs. Mode and Model are required.
type Config struct {
	// Mode is "pull", "pull-inline", "push" or "collocated"
	// (ModeCollocated: no disaggregation).
	Mode string
	// Replicas is the number of engines of a collocated stack (default
	// DefaultReplicas); the split modes always run one prefill and one
	// decode engine.
	Replicas int
	// Model is both engines' KV geometry, Compute their modeled compute.
	Model   server.ModelSpec
	Compute server.ComputeModel
	// ServedModelName is the name clients send (default Model.Name).
	ServedModelName string
	// TPSize of both engines (default Model.TPSize, else 1).
	TPSize int
	// PrefillPPSize is the prefill engine's pipeline-parallel size
	// (default 1; more needs mode "push").
	PrefillPPSize int
	// ProgressChunk is the progressive modes' chunk in tokens (0:
	// DefaultProgressChunk).
	ProgressChunk int
	// StagingSlots and StagingSlotBytes are each rank's staging slots in
	// the staged modes (defaults DefaultStagingSlots, and a slot of 2048
	// blocks of the rank: a 32k-token prompt). StagingCopier is the prefill
	// engine's gather (nil: a host copy); decode scatters with a host copy.
	StagingSlots     int
	StagingSlotBytes uint64
	StagingCopier    connector.Copier
	// NumBlocks per rank of each engine (default the engine's).
	NumBlocks int
	// MaxBatch bounds the sequences a decode step runs (default the
	// engine's).
	MaxBatch int
	// Lease is how long prefill holds finished blocks for decode, and
	// RequestTimeout bounds each request's waits in the engines (defaults:
	// the engine's).
	Lease, RequestTimeout time.Duration
	// NewAgent makes the engines' agents. Nil: loopback agents on one fabric
	// whose links follow Link (the stack closes the fabric).
	NewAgent func(name string) (nixl.Agent, error)
	// Link is the loopback fabric's transfer model when NewAgent is nil.
	Link loopback.TransferModel
	// ProxyAddr is the proxy's listen address (default "127.0.0.1:0").
	ProxyAddr string
	// KVHook is the prefill engine's server.Config.KVHook (tests).
	KVHook func(requestID string, rank int, l descriptors.Layout, blocks []int, mem []byte)
	// Logger is both engines' server.Config.Logger, and says what Close
	// waits for (default: none, as the engines').
	Logger *zap.Logger
	// Protocol is both engines' server.Config.Protocol (default gonixl's);
	// in vLLM's (pull modes only) the engines agree on VLLMVersion "0.0.0"
	// and the FLASH_ATTN backend.
	Protocol string
	// Bidirectional (pull modes) runs the engines and the proxy with
	// bidirectional KV for multi-turn chats: a chat's next turn reads its
	// history back from decode (server.Config.Bidirectional).
	Bidirectional bool
	// KVLayout is the engines' server.Config.KVLayout ("HND" or "NHD";
	// default HND), DecodeKVLayout the decode engine's where it differs
	// (default KVLayout): the connectors permute between the orders.
	KVLayout, DecodeKVLayout string
	// TracerProvider records the proxy's, the engines' and their
	// connectors' spans: one trace per request (docs/metrics.md, "Traces").
	// Default: otel's global provider.
	TracerProvider trace.TracerProvider
	// Chat is the chat pipeline (examples/render/chat) of chat
	// completions: the engines run it in process (server.Config.Chat), or,
	// with Render, a render server runs it and the engines run tokens-only.
	// Nil with Render: the default pipeline.
	Chat *chat.Pipeline
	// Render (split modes) starts the render tier (render.go): a render
	// server in process, the engines tokens-only, the proxy's three hops.
	Render bool
	// RenderWorkers is the render server's Workers (default 1, vLLM's
	// --renderer-num-workers).
	RenderWorkers int
	// Replies is the engines' reply script (server.Config.Replies).
	Replies [][]int
}

// DefaultShutdownTimeout bounds Close.
const DefaultShutdownTimeout = 30 * time.Second

// Stack is one running prefill engine, decode engine and proxy; or, in
// ModeCollocated, Engines behind a balancer (Prefill, Decode and Proxy nil).
type Stack struct {
	Prefill, Decode *server.Server
	Proxy           *pd.Proxy
	// Engines are every engine of the stack: prefill and decode, or the
	// collocated replicas.
	Engines    []*server.Server
	http       *http.Server
	ln         net.Listener
	fabric     *loopback.Fabric
	collocated bool
	log        *zap.Logger
	// RenderURL is the render server's base URL (Config.Render), else "".
	RenderURL  string
	renderHTTP *http.Server
}

// ConnectorOf returns the engine connector and the decode Inline setting of
// a mode.
func ConnectorOf(mode string) (connector string, inline bool, err error) {
	switch mode {
	case "pull":
		return server.ConnPull, false, nil
	case "pull-inline":
		return server.ConnPull, true, nil
	case "push", ModePushProgressive, ModePushProgressiveLayers, ModePushStaged, ModePushProgressiveStaged:
		return server.ConnPush, false, nil
	}
	return "", false, fmt.Errorf("mode %q: want pull, pull-inline, push, %s, %s, %s or %s", mode, ModePushProgressive, ModePushProgressiveLayers, ModePushStaged, ModePushProgressiveStaged)
}

// Start starts a stack; Close stops it.
func Start(cfg Config) (_ *Stack, err error) {
	collocated := cfg.Mode == ModeCollocated
	connector, inline := server.ConnPull, false
	if !collocated {
		if connector, inline, err = ConnectorOf(cfg.Mode); err != nil {
			return nil, err
		}
	}
	s := &Stack{log: cfg.Logger}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	newAgent := cfg.NewAgent
	if newAgent == nil {
		if s.fabric, err = loopback.NewFabric(loopback.WithModel(cfg.Link)); err != nil {
			return nil, err
		}
		newAgent = func(name string) (nixl.Agent, error) { return s.fabric.NewAgent(name) }
	}
	if cfg.Render && collocated {
		return nil, errors.New("stack: Config.Render needs a split mode (the render tier feeds P/D legs)")
	}
	if cfg.Render && cfg.Chat == nil {
		if cfg.Chat, err = chat.New(chat.Config{}); err != nil {
			return nil, err
		}
	}
	base := server.Config{Connector: connector, Replies: cfg.Replies, Model: cfg.Model, Compute: cfg.Compute, ServedModelName: cfg.ServedModelName,
		TPSize: cfg.TPSize, NumBlocks: cfg.NumBlocks, MaxBatch: cfg.MaxBatch, NewAgent: newAgent,
		Lease: cfg.Lease, RequestTimeout: cfg.RequestTimeout, Logger: cfg.Logger, Protocol: cfg.Protocol,
		Bidirectional: cfg.Bidirectional, KVLayout: cfg.KVLayout, TracerProvider: cfg.TracerProvider}
	if cfg.Protocol == server.ProtocolVLLM {
		base.VLLMVersion, base.AttentionBackend = "0.0.0", "FLASH_ATTN"
	}
	if cfg.Render {
		base.TokensOnly, base.VocabSize = true, cfg.Chat.Tokenizer().VocabSize()
	} else {
		base.Chat = cfg.Chat
	}
	if collocated {
		return s, s.startCollocated(cfg, base)
	}
	pc := base
	pc.Role, pc.EngineID, pc.KVHook, pc.PPSize = server.RolePrefill, "prefill-0", cfg.KVHook, cfg.PrefillPPSize
	if cfg.Mode == ModePushProgressive || cfg.Mode == ModePushProgressiveLayers || cfg.Mode == ModePushProgressiveStaged {
		pc.ProgressChunk = cmp.Or(cfg.ProgressChunk, DefaultProgressChunk)
	}
	pc.ProgressLayers = cfg.Mode == ModePushProgressiveLayers
	staged := cfg.Mode == ModePushStaged || cfg.Mode == ModePushProgressiveStaged
	if staged {
		st := stagingOf(cfg)
		base.Staging, pc.Staging = st, st
		pc.Staging.Copier = cfg.StagingCopier
	}
	if s.Prefill, err = server.New(pc); err != nil {
		return nil, fmt.Errorf("prefill engine: %w", err)
	}
	dc := base
	dc.Role, dc.EngineID, dc.Inline = server.RoleDecode, "decode-0", inline
	if cfg.DecodeKVLayout != "" {
		dc.KVLayout = cfg.DecodeKVLayout
	}
	if s.Decode, err = server.New(dc); err != nil {
		return nil, fmt.Errorf("decode engine: %w", err)
	}
	s.Engines = []*server.Server{s.Prefill, s.Decode}
	pcfg := pd.Config{Prefill: []string{s.Prefill.URL()}, Decode: []string{s.Decode.URL()}, Connector: connector,
		Bidirectional: cfg.Bidirectional, TracerProvider: cfg.TracerProvider}
	if cfg.Render {
		if err := s.startRender(cfg); err != nil {
			return nil, err
		}
		pcfg.Render, pcfg.RenderPipeline = []string{s.RenderURL}, cfg.Chat
	}
	if s.Proxy, err = pd.New(pcfg); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return s, s.serve(cfg.ProxyAddr, s.Proxy)
}

// stagingOf is the staged modes' staging of each rank (StagingOn).
func stagingOf(cfg Config) connector.Staging {
	return connector.Staging{Mode: connector.StagingOn, Slots: cmp.Or(cfg.StagingSlots, DefaultStagingSlots),
		SlotBytes: cmp.Or(cfg.StagingSlotBytes, stagingSlotBytes(cfg))}
}

// stagingSlotBytes is the default staging slot: 2048 blocks of one rank's
// KV (every layer's K and V of its heads), 16-byte aligned.
func stagingSlotBytes(cfg Config) uint64 {
	m := cfg.Model
	tp := max(cmp.Or(cfg.TPSize, m.TPSize), 1)
	heads := max(m.KVHeads/tp, 1)
	perBlock := uint64(2*m.Layers*heads*m.HeadDim*m.DTypeBytes) * uint64(m.BlockSize)
	return (2048*perBlock + 15) &^ 15
}

// serve starts the stack's front HTTP server on addr.
func (s *Stack) serve(addr string, h http.Handler) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var err error
	if s.ln, err = net.Listen("tcp", addr); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	s.http = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go s.http.Serve(s.ln) //nolint:errcheck // ends with ErrServerClosed at close
	return nil
}

// startCollocated starts cfg.Replicas engines of base (a decode role, which
// serves requests without kv_transfer_params itself: prefill and decode on
// one loop) and the balancer in front of them.
func (s *Stack) startCollocated(cfg Config, base server.Config) error {
	n := cfg.Replicas
	if n == 0 {
		n = DefaultReplicas
	}
	if n < 1 {
		return fmt.Errorf("stack: Config.Replicas is %d, want > 0", n)
	}
	s.collocated = true
	var urls []string
	for i := range n {
		c := base
		c.Role, c.EngineID = server.RoleDecode, fmt.Sprintf("collocated-%d", i)
		e, err := server.New(c)
		if err != nil {
			return fmt.Errorf("collocated engine %d: %w", i, err)
		}
		s.Engines = append(s.Engines, e)
		urls = append(urls, e.URL())
	}
	b, err := newBalancer(urls)
	if err != nil {
		return err
	}
	return s.serve(cfg.ProxyAddr, b)
}

// URL is the proxy's base URL, e.g. http://127.0.0.1:41234.
func (s *Stack) URL() string { return "http://" + s.ln.Addr().String() }

// Close is Shutdown bounded by DefaultShutdownTimeout.
func (s *Stack) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	return s.Shutdown(ctx)
}

// Shutdown stops the proxy (its requests in flight finish, until ctx ends),
// then the decode engine (its loads end), then the prefill engine, without
// waiting for its held blocks to be read: no decode is left to read them.
// Then the loopback fabric closes. Each step is logged (Config.Logger) with
// how long it took. Cancelling ctx (say, on a second Ctrl-C) cuts every wait
// short: requests in flight are cancelled and blocks released. Calls after
// the first return nil.
func (s *Stack) Shutdown(ctx context.Context) error {
	if s.http == nil && s.renderHTTP == nil && s.Proxy == nil && s.Decode == nil && s.Prefill == nil && len(s.Engines) == 0 && s.fabric == nil {
		return nil
	}
	var errs []error
	start := time.Now()
	step := func(what string, f func() error) {
		t := time.Now()
		err := f()
		s.log.Info("stack closing: "+what, zap.Duration("took", time.Since(t).Round(time.Millisecond)), zap.Error(err))
		errs = append(errs, err)
	}
	if s.http != nil {
		bound := zap.String("bound", "none")
		if dl, ok := ctx.Deadline(); ok {
			bound = zap.Duration("bound", time.Until(dl).Round(time.Millisecond))
		}
		s.log.Info("stack closing: waiting for the proxy's requests in flight", bound)
		step("proxy's HTTP server stopped", func() error { return s.http.Shutdown(ctx) })
		s.http = nil
	}
	if s.Proxy != nil {
		step("proxy closed", s.Proxy.Close)
		s.Proxy = nil
	}
	if s.renderHTTP != nil {
		step("render server stopped", func() error { return s.renderHTTP.Shutdown(ctx) })
		s.renderHTTP = nil
	}
	if s.Decode != nil {
		step("decode engine closed", func() error { return s.Decode.Close(ctx) })
		s.Decode = nil
	}
	if s.Prefill != nil {
		step("prefill engine closed", func() error {
			return s.Prefill.Shutdown(ctx, server.ShutdownOptions{HoldDrain: -1})
		})
		s.Prefill = nil
	}
	if s.collocated { // no engine holds blocks for another
		for i, e := range s.Engines {
			step(fmt.Sprintf("collocated engine %d closed", i), func() error { return e.Close(ctx) })
		}
	}
	s.Engines = nil
	if s.fabric != nil {
		s.fabric.Close()
		s.fabric = nil
	}
	err := errors.Join(errs...)
	s.log.Info("stack closed", zap.Duration("took", time.Since(start).Round(time.Millisecond)), zap.Error(err))
	return err
}
