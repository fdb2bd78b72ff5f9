package pushconn

import (
	"net"
	"strconv"
	"time"

	"github.com/gonixl/gonixl/clock"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/handshake"
	"go.uber.org/zap"
)

// EngineConfig describes the local engine: who it is, where its side
// channel listens and what a peer engine must agree with. Its zero value is
// not usable: EngineID, Model, DType, TPSize and BlockSize are required.
// The pull connector takes the same fields.
type EngineConfig struct {
	// EngineID names the engine; peers address it by this id.
	EngineID string
	// ListenAddr is the side channel's listen address (default
	// "127.0.0.1:0", a free loopback port; vLLM's port is 5600).
	ListenAddr string
	// AdvertiseHost is the host peers reach the side channel at (default:
	// the listen address's host).
	AdvertiseHost string
	// Model and DType identify the model and the KV-cache element type; a
	// peer engine must give the same.
	Model string
	DType string
	// KVLayout names the KV-cache memory layout; "HND" (the default) is
	// the only one supported.
	KVLayout string
	// TPSize is the engine's tensor-parallel size and BlockSize its KV
	// block size in tokens; every rank's Layout must give the same.
	TPSize    int
	BlockSize int
	// HandshakeTimeout bounds each handshake with a peer engine, retries
	// included (default DefaultHandshakeTimeout, vLLM's 5 s).
	HandshakeTimeout time.Duration
	// Clock is the engine's time source (default: the wall clock); its
	// ranks use it unless their RankConfig names one.
	Clock clock.Clock
	// Logger receives side-channel warnings (default: none).
	Logger *zap.Logger
}

func (c EngineConfig) core() engine.Config {
	return engine.Config{
		EngineID: c.EngineID, ListenAddr: c.ListenAddr, AdvertiseHost: c.AdvertiseHost,
		Model: c.Model, DType: c.DType, KVLayout: c.KVLayout, TPSize: c.TPSize, BlockSize: c.BlockSize,
		HandshakeTimeout: c.HandshakeTimeout, Clock: c.Clock, Logger: c.Logger,
	}
}

// Engine is one engine's side channel and handshake client, shared by its
// ranks' Producers or Consumers. It serves this engine's handshake payload
// (every rank's agent metadata and layout, in push mode) and fetches peer
// engines' payloads, once per peer.
type Engine struct {
	core *engine.Engine
}

// NewEngine validates cfg and starts the side channel.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	core, err := engine.Start(cfg.core(), engine.Connector{Name: "pushconn", Mode: handshake.ModePush, ErrInvalid: ErrInvalid, ErrClosed: ErrClosed})
	if err != nil {
		return nil, err
	}
	return &Engine{core: core}, nil
}

// ID returns the engine id.
func (e *Engine) ID() string { return e.core.Config().EngineID }

// Host returns the host peers reach this engine's side channel at.
func (e *Engine) Host() string { return e.core.Host() }

// Port returns the side channel's TCP port.
func (e *Engine) Port() int { return e.core.Port() }

// TPSize returns the engine's tensor-parallel size.
func (e *Engine) TPSize() int { return e.core.Config().TPSize }

// Stats returns the side channel's counters: MalformedFrames, and
// FailedHandshakes for the hellos it refused as incompatible (another
// transfer mode, model, dtype or layout).
func (e *Engine) Stats() Stats { return e.core.Stats() }

// Close stops the side channel. Close the engine's Producers and
// Consumers first.
func (e *Engine) Close() error { return e.core.Close() }

func (e *Engine) addr(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
