package pushconn

import (
	"net"
	"strconv"

	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/handshake"
)

// EngineConfig describes the local engine: who it is (EngineID, by which
// peers address it), where its side channel listens (ListenAddr,
// AdvertiseHost) and what a peer must agree with (Model, DType, KVLayout,
// TPSize, BlockSize), plus HandshakeTimeout and Logger. EngineID, Model,
// DType, TPSize and BlockSize are required; the others default to
// "127.0.0.1:0", the listen host, "HND", DefaultHandshakeTimeout and no
// logging. The pull connector takes the same configuration.
type EngineConfig = engine.Config

// Engine is one engine's side channel and handshake client, shared by its
// ranks' Producers or Consumers. It serves this engine's handshake payload
// (every rank's agent metadata and layout, in push mode) and fetches peer
// engines' payloads, once per peer.
type Engine struct {
	core *engine.Engine
}

// NewEngine validates cfg and starts the side channel.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	core, err := engine.Start(cfg, engine.Connector{Name: "pushconn", Mode: handshake.ModePush, ErrInvalid: ErrInvalid})
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
