package pullconn

import (
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/sidechannel"
	"github.com/gonixl/gonixl/internal/stats"
)

// EngineConfig describes the local engine: who it is, where its side
// channel listens and what a peer must agree with.
type EngineConfig struct {
	// EngineID names the engine; Params carry it as remote_engine_id.
	EngineID string
	// ListenAddr is the side channel's listen address (default
	// "127.0.0.1:0", a free loopback port).
	ListenAddr string
	// AdvertiseHost is the host put in Params.RemoteHost (default: the
	// listen address's host).
	AdvertiseHost string
	// Model and DType identify the model and the KV-cache element type;
	// KVLayout names the KV-cache layout (default "HND"). A peer engine
	// must agree on all three.
	Model    string
	DType    string
	KVLayout string
	// TPSize is the engine's tensor-parallel size; BlockSize its KV block
	// size in tokens. Every rank's layout must agree.
	TPSize    int
	BlockSize int
	// HandshakeTimeout bounds each handshake with a peer engine, retries
	// included (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// Logger receives side-channel warnings (default: none).
	Logger *zap.Logger
}

// Engine is one engine's side channel and handshake client, shared by its
// ranks. On prefill its side channel serves every rank's agent metadata and
// layout at one address (vLLM's side-channel port); on decode the client
// fetches each prefill engine's payload once for all ranks.
type Engine struct {
	cfg    EngineConfig
	server *handshake.Server
	client *handshake.Client
	host   string
	port   int
	stats  *stats.Set
}

// NewEngine validates cfg and starts the side channel.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	switch {
	case cfg.EngineID == "":
		return nil, invalidf("EngineConfig.EngineID is empty")
	case cfg.TPSize < 1:
		return nil, invalidf("EngineConfig.TPSize is %d, want >= 1", cfg.TPSize)
	case cfg.BlockSize < 1:
		return nil, invalidf("EngineConfig.BlockSize is %d, want >= 1", cfg.BlockSize)
	case cfg.HandshakeTimeout < 0:
		return nil, invalidf("EngineConfig.HandshakeTimeout is %v, want > 0", cfg.HandshakeTimeout)
	case cfg.Model == "":
		return nil, invalidf("EngineConfig.Model is empty")
	case cfg.DType == "":
		return nil, invalidf("EngineConfig.DType is empty")
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.KVLayout == "" {
		cfg.KVLayout = "HND"
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	compat := handshake.Compat{Version: handshake.Version, Model: cfg.Model, DType: cfg.DType, Layout: cfg.KVLayout, Mode: handshake.ModePull}
	client, err := handshake.NewClient(cfg.EngineID, compat, cfg.HandshakeTimeout, sidechannel.DefaultMaxFrame)
	if err != nil {
		return nil, invalidf("EngineConfig: %v", err)
	}
	e := &Engine{cfg: cfg, client: client, stats: stats.New()}
	srv, err := handshake.Serve(cfg.ListenAddr, handshake.Engine{
		EngineID: cfg.EngineID, Compat: compat, TPSize: cfg.TPSize, PPSize: 1, BlockSize: cfg.BlockSize,
	}, handshake.ServerOptions{
		ServerOptions: sidechannel.ServerOptions{
			Logger:      cfg.Logger,
			OnMalformed: func(error) { e.stats.MalformedFrames.Inc() },
		},
		OnRefused: func(err error) {
			e.stats.FailedHandshakes.Inc()
			cfg.Logger.Warn("pullconn: refused a handshake", zap.Error(err))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("pullconn: engine %q: side channel: %w", cfg.EngineID, err)
	}
	e.server = srv
	e.port = srv.Addr().Port
	e.host = cfg.AdvertiseHost
	if e.host == "" {
		e.host = srv.Addr().IP.String()
		if h, _, err := net.SplitHostPort(cfg.ListenAddr); err == nil && h != "" && !srv.Addr().IP.IsUnspecified() {
			e.host = h
		}
	}
	return e, nil
}

// ID returns the engine id.
func (e *Engine) ID() string { return e.cfg.EngineID }

// Host returns the host peers reach the side channel at.
func (e *Engine) Host() string { return e.host }

// Port returns the side channel's TCP port.
func (e *Engine) Port() int { return e.port }

// Stats returns the side channel's counters: MalformedFrames and
// FailedHandshakes (hellos refused as incompatible).
func (e *Engine) Stats() Stats { return e.stats.Snapshot() }

// Close stops the side channel. Close the engine's Producers and Consumers
// first.
func (e *Engine) Close() error { return e.server.Close() }
