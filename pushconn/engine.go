package pushconn

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/sidechannel"
	"github.com/gonixl/gonixl/internal/stats"
)

// EngineConfig describes the local engine: who it is, what it serves, and
// what a peer must agree with.
type EngineConfig struct {
	// EngineID names the engine; peers address it by this id.
	EngineID string
	// ListenAddr is the side channel's listen address (default
	// "127.0.0.1:0", a free loopback port).
	ListenAddr string
	// AdvertiseHost is the host peers reach the side channel at (default:
	// the listen address's host).
	AdvertiseHost string
	// Model and DType identify the model and the KV-cache element type;
	// KVLayout names the KV-cache layout (default "HND"). A peer must agree
	// on all three.
	Model    string
	DType    string
	KVLayout string
	// TPSize is the engine's tensor-parallel size; every rank's layout
	// must say the same.
	TPSize int
	// BlockSize is the engine's KV block size in tokens.
	BlockSize int
	// HandshakeTimeout bounds each handshake with a peer engine (default
	// DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// Logger receives side-channel debug lines (default: none).
	Logger *zap.Logger
}

// Engine is one engine's side channel and handshake client, shared by its
// ranks' Producers or Consumers. It serves this engine's handshake payload
// (every rank's agent metadata and layout, in push mode) and fetches peer
// engines' payloads, once per peer.
type Engine struct {
	cfg    EngineConfig
	compat handshake.Compat
	server *handshake.Server
	client *handshake.Client
	host   string
	port   int
	stats  *stats.Set
}

// NewEngine validates cfg and starts the side channel.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.EngineID == "" {
		return nil, invalidf("EngineConfig.EngineID is empty")
	}
	if cfg.TPSize < 1 {
		return nil, invalidf("EngineConfig.TPSize is %d, want >= 1", cfg.TPSize)
	}
	if cfg.BlockSize < 1 {
		return nil, invalidf("EngineConfig.BlockSize is %d, want >= 1", cfg.BlockSize)
	}
	if cfg.HandshakeTimeout < 0 {
		return nil, invalidf("EngineConfig.HandshakeTimeout is negative (%v)", cfg.HandshakeTimeout)
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
	compat := handshake.Compat{Version: handshake.Version, Model: cfg.Model, DType: cfg.DType, Layout: cfg.KVLayout, Mode: handshake.ModePush}
	if err := compat.Validate(); err != nil {
		return nil, fmt.Errorf("%w: EngineConfig: %v", ErrInvalid, err)
	}
	client, err := handshake.NewClient(cfg.EngineID, compat, cfg.HandshakeTimeout, sidechannel.DefaultMaxFrame)
	if err != nil {
		return nil, fmt.Errorf("%w: EngineConfig: %v", ErrInvalid, err)
	}
	e := &Engine{cfg: cfg, compat: compat, client: client, stats: stats.New()}
	srv, err := handshake.Serve(cfg.ListenAddr, handshake.Engine{
		EngineID: cfg.EngineID, Compat: compat, TPSize: cfg.TPSize, PPSize: 1, BlockSize: cfg.BlockSize,
	}, handshake.ServerOptions{
		ServerOptions: sidechannel.ServerOptions{
			Logger:      cfg.Logger,
			OnMalformed: func(error) { e.stats.MalformedFrames.Inc() },
		},
		OnRefused: func(err error) {
			e.stats.FailedHandshakes.Inc()
			cfg.Logger.Warn("pushconn: refused a handshake", zap.Error(err))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("pushconn: engine %q: side channel: %w", cfg.EngineID, err)
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

// Host returns the host peers reach this engine's side channel at.
func (e *Engine) Host() string { return e.host }

// Port returns the side channel's TCP port.
func (e *Engine) Port() int { return e.port }

// TPSize returns the engine's tensor-parallel size.
func (e *Engine) TPSize() int { return e.cfg.TPSize }

// Stats returns the side channel's counters: MalformedFrames, and
// FailedHandshakes for the hellos it refused as incompatible (another
// transfer mode, model, dtype or layout).
func (e *Engine) Stats() Stats { return e.stats.Snapshot() }

// Close stops the side channel. Close the engine's Producers and
// Consumers first.
func (e *Engine) Close() error { return e.server.Close() }

func (e *Engine) addr(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
