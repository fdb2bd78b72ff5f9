package pullconn

import (
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/handshake"
)

// EngineConfig describes the local engine: who it is (EngineID, which
// Params carry as remote_engine_id), where its side channel listens
// (ListenAddr, AdvertiseHost) and what a peer must agree with (Model,
// DType, KVLayout, TPSize, BlockSize), plus HandshakeTimeout and Logger.
// EngineID, Model, DType, TPSize and BlockSize are required; the others
// default to "127.0.0.1:0", the listen host, "HND",
// DefaultHandshakeTimeout and no logging. The push connector takes the
// same configuration.
type EngineConfig = engine.Config

// Engine is one engine's side channel and handshake client, shared by its
// ranks. On prefill its side channel serves every rank's agent metadata and
// layout at one address (vLLM's side-channel port); on decode the client
// fetches each prefill engine's payload once for all ranks.
type Engine struct {
	core *engine.Engine
}

// NewEngine validates cfg and starts the side channel.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	core, err := engine.Start(cfg, engine.Connector{Name: "pullconn", Mode: handshake.ModePull, ErrInvalid: ErrInvalid})
	if err != nil {
		return nil, err
	}
	return &Engine{core: core}, nil
}

// ID returns the engine id.
func (e *Engine) ID() string { return e.core.Config().EngineID }

// Host returns the host peers reach the side channel at.
func (e *Engine) Host() string { return e.core.Host() }

// Port returns the side channel's TCP port.
func (e *Engine) Port() int { return e.core.Port() }

// Stats returns the side channel's counters: MalformedFrames and
// FailedHandshakes (hellos refused as incompatible).
func (e *Engine) Stats() Stats { return e.core.Stats() }

// Close stops the side channel. Close the engine's Producers and Consumers
// first.
func (e *Engine) Close() error { return e.core.Close() }
