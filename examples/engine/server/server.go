// Package server is a simulated inference engine behind vLLM's OpenAI HTTP
// API, for disaggregated serving over gonixl: its model is a compute-time
// model and a deterministic tokenizer, but its KV cache is real memory moved
// by the pull (pullconn) or push (pushconn) connector, one NIXL agent per TP
// rank, and verified byte by byte on decode.
//
// Prefill (kv_producer) and decode (kv_consumer) speak vLLM's disaggregated
// protocol through kv_transfer_params; a request without them is served
// locally (prefill and decode in one engine). The KV content of every token
// is a function of the prompt prefix up to it, the layer, K or V, the head
// and the byte, and decode derives the generated tokens from a checksum of
// the KV bytes it holds: a block that arrives wrong changes the text and is
// counted (Stats.KVVerifyFailures).
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pullconn"
	_ "github.com/gonixl/gonixl/pushconn" // registers the "push" connector
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Info is what GET /kv_transfer_info returns.
type Info struct {
	EngineID        string `json:"engine_id"`
	Role            string `json:"role"`
	Connector       string `json:"connector"`
	Model           string `json:"model"`
	SideChannelHost string `json:"side_channel_host"`
	SideChannelPort int    `json:"side_channel_port"`
	TPSize          int    `json:"tp_size"`
	PPSize          int    `json:"pp_size"`
	BlockSize       int    `json:"block_size"`
	// KVGeometry is what decides whether two engines can exchange KV
	// (kvgeometry.go).
	KVGeometry *KVGeometry `json:"kv_geometry"`
}

// Stats are the engine's counters and gauges.
type Stats struct {
	RequestsDone     uint64 // answered in full
	RequestsFailed   uint64 // answered with an error
	RequestsAborted  uint64 // the client went away first
	KVBytesVerified  uint64 // decode: KV bytes that matched the prompt's pattern
	KVVerifyFailures uint64 // decode: requests with at least one wrong KV byte
	KVRecomputed     uint64 // decode: failed loads prefilled locally (FailurePolicy "recompute")
	// Progress reports (push prefill, Config.ProgressChunk and
	// ProgressLayers): calls a rank took, and calls a rank refused (it is
	// not asked again for that request, which moves at its finish).
	ProgressReports, ProgressRefused uint64
	// Bidirectional KV (bidir.go): prefill's history tokens read back from
	// decode and those offered but recomputed; decode's turns exported.
	HistoryTokensRead, HistoryTokensRecomputed, HistoryExported uint64
	BlocksInUse                                                 int // KV blocks allocated (per rank; ranks allocate alike)
	Running                                                     int // prefilling or decoding
	Waiting                                                     int // queued for blocks, or waiting for their KV
}

// Server is one simulated engine: its connector ranks, its engine loop and
// its HTTP server.
type Server struct {
	cfg    Config
	log    *zap.Logger
	info   Info
	agents []nixl.Agent
	bufs   []*nixl.Buffer
	// staging is every rank's staging memory (Config.Staging), in
	// stageBufs.
	staging   []nixl.Desc
	stageBufs []*nixl.Buffer
	lays      []descriptors.Layout
	closeE    func() error // the connector Engine's Close
	prods     []connector.Producer
	conss     []connector.Consumer
	hist      historyRoles // bidirectional KV's D->P roles

	ln       net.Listener
	httpSrv  *http.Server
	served   chan struct{}
	baseCtx  context.Context
	cancel   context.CancelFunc
	handlers handlerGate // the HTTP handlers running (handlers.go)

	submitCh chan *request
	cancelCh chan *request
	stopCh   chan struct{}
	loopDone chan struct{}
	closing  atomic.Bool
	active   atomic.Int64 // completion handlers running

	st struct {
		done, failed, aborted, verified, verifyFail, recomputed atomic.Uint64
		abortFound, abortUnknown, abortBad                      atomic.Uint64 // abort_requests ids (abort.go)
		progressTaken, progressRefused                          atomic.Uint64 // progress reports (progress.go)
		blocks, running, waiting                                atomic.Int64
	}
	reg  *prometheus.Registry
	prom promMetrics

	gens generating // the generate requests being served, for abort_requests
	// drops counts the holds Shutdown dropped as unclaimed, per rank, and
	// the requests (dropped on every rank) it logged (shutdown.go).
	drops struct {
		perRank []int
		logged  int
	}

	closeOnce sync.Once
	closeErr  error
	loop      *loop

	incarn string // random for every New: this start's incarnation in the registry
}

// New builds the engine: the connector Engine and one Producer (prefill) or
// Consumer (decode) per TP rank over cfg.NewAgent's agents, the KV memory
// of every rank, the engine loop and the HTTP server.
func New(cfg Config) (_ *Server, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With(zap.String("engine_id", cfg.EngineID), zap.String("role", cfg.Role)),
		submitCh: make(chan *request), cancelCh: make(chan *request, 64),
		stopCh: make(chan struct{}), loopDone: make(chan struct{}), served: make(chan struct{}), incarn: randHex(16)}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	geom := cfg.geometry()
	ec := cfg.engineConfig()
	ec.Connector = cfg.Connector // "pull" or "push": the only place the engine picks
	e, err := connector.NewEngine(ec)
	if err != nil {
		return nil, err
	}
	s.closeE = e.Close
	s.info.SideChannelHost, s.info.SideChannelPort = e.Host(), e.Port()
	for r := range cfg.ranks() { // every TP rank of every pipeline stage
		a, err := cfg.NewAgent(cfg.agentName(r))
		if err != nil {
			return nil, fmt.Errorf("engine: agent of rank %d: %w", r, err)
		}
		s.agents = append(s.agents, a)
		size := cfg.rankBytes(geom, r)
		buf, err := nixl.AllocBuffer(int(size))
		if err != nil {
			return nil, fmt.Errorf("engine: KV memory of rank %d (%d bytes): %w", r, size, err)
		}
		s.bufs = append(s.bufs, buf)
		l, err := cfg.rankLayout(geom, r, buf.RegDesc().Desc)
		if err != nil {
			return nil, fmt.Errorf("engine: KV layout of rank %d: %w", r, err)
		}
		s.lays = append(s.lays, l)
		// The rank tags its own lines with engine_id, tp_rank and role; a
		// tag added here would appear twice in each.
		rc := connector.RankConfig{Agent: a, Layout: l, Logger: cfg.ConnLogger, StatsInterval: cfg.StatsInterval, Lease: cfg.Lease, TracerProvider: cfg.TracerProvider,
			FailurePolicy: connector.Policy(cfg.FailurePolicy)}
		if cfg.Staging.Mode != connector.StagingOff {
			n := cfg.Staging.SlotBytes * uint64(cfg.Staging.Slots)
			sb, err := nixl.AllocBuffer(int(n))
			if err != nil {
				return nil, fmt.Errorf("engine: staging memory of rank %d (%d bytes): %w", r, n, err)
			}
			s.stageBufs = append(s.stageBufs, sb) // not in bufs, which the loop indexes by rank
			rc.Staging = cfg.Staging
			rc.Staging.Mem, rc.Staging.Base = l.Mem, sb.Addr()
			s.staging = append(s.staging, nixl.Desc{Addr: sb.Addr(), Len: n})
		}
		if cfg.Role == RolePrefill {
			p, err := e.NewProducer(rc)
			if err != nil {
				return nil, err
			}
			s.prods = append(s.prods, p)
		} else {
			var opts connector.RankOptions = rc
			if cfg.Inline && cfg.Connector == ConnPull { // pull's own option: a push rank refuses pullconn.Config
				opts = pullconn.Config{RankConfig: rc, Inline: true}
			}
			c, err := e.NewConsumer(opts)
			if err != nil {
				return nil, err
			}
			s.conss = append(s.conss, c)
		}
		if err := s.addHistoryRank(e, r, rc); err != nil {
			return nil, err
		}
	}
	s.info = Info{EngineID: cfg.EngineID, Role: cfg.Role, Connector: cfg.Connector, Model: cfg.ServedModelName,
		SideChannelHost: s.info.SideChannelHost, SideChannelPort: s.info.SideChannelPort,
		TPSize: cfg.TPSize, PPSize: max(cfg.PPSize, 1), BlockSize: cfg.Model.BlockSize, KVGeometry: kvGeometryOf(geom)}
	if err := s.initMetrics(e); err != nil {
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("engine: HTTP listen: %w", err)
	}
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	s.httpSrv = &http.Server{Handler: s.routes(), BaseContext: func(net.Listener) context.Context { return s.baseCtx }}
	s.loop = newLoop(s)
	go s.loop.run()
	go func() {
		defer close(s.served)
		if err := s.httpSrv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP server", zap.Error(err))
		}
	}()
	s.log.Info("engine serving", zap.String("url", s.URL()), zap.String("connector", cfg.Connector),
		zap.Int("tp_size", cfg.TPSize), zap.Int("num_blocks", cfg.NumBlocks), zap.String("side_channel",
			net.JoinHostPort(s.info.SideChannelHost, strconv.Itoa(s.info.SideChannelPort))))
	return s, nil
}

// URL returns the HTTP base URL, "http://host:port".
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// StagingMemory returns every rank's staging memory (Config.Staging), one
// range per rank; nil without staging.
func (s *Server) StagingMemory() []nixl.Desc { return slices.Clone(s.staging) }

// Info returns what GET /kv_transfer_info returns.
func (s *Server) Info() Info { return s.info }

// Stats returns a snapshot of the engine's counters.
func (s *Server) Stats() Stats {
	st := Stats{RequestsDone: s.st.done.Load(), RequestsFailed: s.st.failed.Load(), RequestsAborted: s.st.aborted.Load(),
		KVBytesVerified: s.st.verified.Load(), KVVerifyFailures: s.st.verifyFail.Load(), KVRecomputed: s.st.recomputed.Load(),
		ProgressReports: s.st.progressTaken.Load(), ProgressRefused: s.st.progressRefused.Load(),
		BlocksInUse: int(s.st.blocks.Load()), Running: int(s.st.running.Load()), Waiting: int(s.st.waiting.Load())}
	s.historyStats(&st)
	return st
}

// release closes the connector ranks (freeing whatever blocks they still
// held), the Engine, the agents and the memory.
func (s *Server) release() {
	for _, c := range s.conss {
		c.Close()
	}
	for _, p := range s.prods {
		p.Close()
	}
	s.closeHistory()
	if s.loop != nil {
		s.loop.drainConnectors() // the ranks' last results free the blocks
		s.loop.releaseAll()
	}
	if s.closeE != nil {
		s.closeE()
	}
	for _, a := range s.agents {
		a.Close()
	}
	for _, b := range s.bufs {
		b.Free()
	}
	for _, b := range s.stageBufs {
		b.Free()
	}
	s.bufs, s.stageBufs = nil, nil
}
