package connector

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/lease"
)

// EngineConfig describes the local engine: who it is, where its side
// channel listens and what a peer engine must agree with. EngineID, Model
// and Geometry are required; every other field has a default.
type EngineConfig struct {
	// Connector names the connector: "pull" (DefaultConnector, vLLM's
	// NixlConnector) or "push" (vLLM's NixlPushConnector), as vLLM's
	// kv_connector picks one by name on both engines. NewEngine starts the
	// engine of the connector it names; pullconn.NewEngine and
	// pushconn.NewEngine refuse the other's name.
	Connector string
	// EngineID names the engine; peers address it by this id, and pull
	// Params carry it as remote_engine_id.
	EngineID string
	// ListenAddr is the side channel's listen address (default
	// "127.0.0.1:0", a free loopback port; vLLM's port is 5600).
	ListenAddr string
	// AdvertiseHost is the host peers reach the side channel at (default:
	// the listen address's host).
	AdvertiseHost string
	// Model names the model; a peer engine must give the same.
	Model string
	// Geometry is the engine's KV cache: layers, heads, head size, dtype,
	// block size, blocks and TP size. Every rank's Layout must be a layout
	// of it (descriptors.Geometry.Layout builds one); its DType must match
	// the peer engine's.
	Geometry descriptors.Geometry
	// KVLayout names the KV-cache memory layout; "HND" (the default) is
	// the only one supported. The in-block order (HND or NHD) is
	// Geometry.Order: an NHD engine pairs with HND and NHD peers.
	KVLayout string
	// Protocol is the wire the engine speaks with its peers: gonixl's own
	// (the default) or vLLM's (ProtocolVLLM, with VLLM's facts; then
	// ListenAddr is vLLM's side-channel address, VLLM_NIXL_SIDE_CHANNEL_PORT
	// plus the data-parallel index).
	Protocol Protocol
	VLLM     VLLM
	// HandshakeTimeout bounds each handshake with a peer engine, retries
	// included (default DefaultHandshakeTimeout, vLLM's 5 s).
	HandshakeTimeout time.Duration
	// Clock is the engine's time source (default: the wall clock). The
	// side channel stamps its replies with it, the handshake measures
	// clock offsets with it, and ranks use it unless their RankConfig
	// names a clock; give ranks no other clock than this one.
	Clock Clock
	// Logger receives side-channel warnings (default: none), and is every
	// rank's logger when its RankConfig names none.
	Logger *zap.Logger
}

// Engine is one engine's side channel and handshake client, shared by its
// ranks. Its side channel serves every rank's agent metadata and KV layout
// at one address (vLLM's side-channel port); its client fetches each peer
// engine's payload once for all ranks. pullconn.NewEngine and
// pushconn.NewEngine make one for their protocol; its ranks are that
// package's Producers (prefill) or Consumers (decode).
type Engine struct {
	core      *engine.Engine
	connector string // the driver's name, "pull" or "push"
}

// ID returns the engine id.
func (e *Engine) ID() string { return e.core.Config().EngineID }

// Host returns the host peers reach the side channel at.
func (e *Engine) Host() string { return e.core.Host() }

// Port returns the side channel's TCP port.
func (e *Engine) Port() int { return e.core.Port() }

// Geometry returns the engine's KV-cache geometry.
func (e *Engine) Geometry() descriptors.Geometry { return e.core.Config().Geometry }

// Stats returns the side channel's counters: MalformedFrames, and
// FailedHandshakes for the hellos it refused as incompatible (another
// transfer mode, model, dtype or layout).
func (e *Engine) Stats() Stats { return statsOf(e.core.Stats()) }

// Close stops the side channel; later rank constructors fail with
// ErrClosed. Close the engine's Producers and Consumers first. It is
// idempotent.
func (e *Engine) Close() error { return e.core.Close() }

// start validates cfg and starts the engine of connector conn.
func start(cfg EngineConfig, conn engine.Connector) (*Engine, error) {
	if cfg.Connector != "" && cfg.Connector != conn.Mode {
		return nil, fmt.Errorf("%w: EngineConfig.Connector is %q, and %s starts %q engines (connector.NewEngine starts the one the config names)", conn.ErrInvalid, cfg.Connector, conn.Name, conn.Mode)
	}
	g := cfg.Geometry
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("%w: EngineConfig.%s", conn.ErrInvalid, engine.Field(err))
	}
	var clk lease.Clock
	if cfg.Clock != nil {
		clk = cfg.Clock
	}
	var v engine.VLLMConfig
	switch cfg.Protocol {
	case ProtocolGonixl:
	case ProtocolVLLM:
		var err error
		if v, err = vllmConfig(cfg, conn); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: EngineConfig.Protocol is %q, want %q or %q", conn.ErrInvalid, cfg.Protocol, ProtocolGonixl, ProtocolVLLM)
	}
	core, err := engine.Start(engine.Config{
		Protocol: string(cfg.Protocol), VLLM: v,
		EngineID: cfg.EngineID, ListenAddr: cfg.ListenAddr, AdvertiseHost: cfg.AdvertiseHost,
		Model: cfg.Model, Geometry: g, DType: g.DType, TPSize: g.TPSize, PPSize: g.PPSize, BlockSize: g.BlockSize,
		KVLayout: cfg.KVLayout, HandshakeTimeout: cfg.HandshakeTimeout, Clock: clk, Logger: cfg.Logger,
	}, conn)
	if err != nil {
		return nil, err
	}
	return &Engine{core: core, connector: conn.Mode}, nil
}
