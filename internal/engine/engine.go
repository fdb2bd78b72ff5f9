package engine

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"sync"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/sidechannel"
	"github.com/gonixl/gonixl/internal/stats"
)

// Connector says which connector starts an Engine: the connectors differ
// only in these facts.
type Connector struct {
	// Name prefixes errors and log lines ("pullconn", "pushconn").
	Name string
	// Mode is the transfer mode put in the compatibility facts
	// (handshake.ModePull or ModePush), so that a pull engine refuses a
	// push peer and the other way round.
	Mode string
	// ErrInvalid is the connector's sentinel that configuration errors
	// wrap.
	ErrInvalid error
	// ErrClosed is the connector's sentinel for a closed Engine (default
	// ErrClosed of this package).
	ErrClosed error
	// OnExtend, when set, answers peers' hold queries (see
	// handshake.Hello.Extend): pull prefill engines set it.
	OnExtend func(reader, agent string, ids []string) []int64
	// OnConfirm, when set, answers peers' confirmations (see
	// handshake.Hello.Confirm): pull prefill engines set it.
	OnConfirm func(reader, agent string, refs []handshake.HoldRef) []string
	// OnReady, when set, answers peers' readiness queries (see
	// handshake.Hello.Ready): pull prefill engines with staging set it.
	OnReady func(reader, agent string, q handshake.ReadyQuery) []int64
	// State is what the connector keeps per engine (pull: its hold
	// adverts and staging slot index); State returns it.
	State any
}

// ErrClosed is what a closed Engine's rank calls wrap when the connector
// names no sentinel of its own.
var ErrClosed = errors.New("engine closed")

// Engine is one engine's side channel and handshake client, shared by its
// ranks. Its side channel serves every rank's agent metadata and layout at
// one address (vLLM's side-channel port); its client fetches each peer
// engine's payload once for all ranks.
type Engine struct {
	cfg        Config
	name       string // the connector's, for messages
	server     publisher
	client     Client
	host       string
	port       int
	stats      *stats.Set
	errClosed  error
	errInvalid error

	state   any
	mu      sync.Mutex
	closed  bool
	claimed map[claim]bool // TP ranks with a Producer or Consumer, by kind
}

// Start validates cfg, fills its defaults and starts the side channel.
// Configuration errors wrap conn.ErrInvalid and name the field.
func Start(cfg Config, conn Connector) (*Engine, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, fmt.Errorf("%w: %v", conn.ErrInvalid, err)
	}
	e := &Engine{cfg: cfg, name: conn.Name, state: conn.State, stats: stats.New(), errClosed: cmp.Or(conn.ErrClosed, ErrClosed), errInvalid: conn.ErrInvalid}
	if cfg.Protocol == ProtocolVLLM {
		if err := startVLLM(e, cfg, conn); err != nil {
			return nil, err
		}
		return e, nil
	}
	if err := startGonixl(e, cfg, conn); err != nil {
		return nil, err
	}
	return e, nil
}

// State returns the connector's per-engine state (Connector.State).
func (e *Engine) State() any { return e.state }

// Name returns the name of the connector that started the engine.
func (e *Engine) Name() string { return e.name }

// Config returns the configuration with its defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Client returns the client that fetches peer engines' payloads.
func (e *Engine) Client() Client { return e.client }

// VLLM reports whether the engine speaks vLLM's protocol (Config.Protocol).
func (e *Engine) VLLM() bool { return e.cfg.Protocol == ProtocolVLLM }

// Host returns the host peers reach the side channel at.
func (e *Engine) Host() string { return e.host }

// Port returns the side channel's TCP port.
func (e *Engine) Port() int { return e.port }

// Stats returns the side channel's counters: MalformedFrames, and
// FailedHandshakes for hellos refused as incompatible.
func (e *Engine) Stats() stats.Snapshot { return e.stats.Snapshot() }

// Close stops the side channel; later rank constructors fail with the
// connector's ErrClosed. It is idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	already := e.closed
	e.closed = true
	e.mu.Unlock()
	if already {
		return nil
	}
	e.client.Close()
	return e.server.Close()
}

// CheckOpen returns an error matching the connector's ErrClosed once Close
// was called.
func (e *Engine) CheckOpen() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%w: engine %q was closed", e.errClosed, e.cfg.EngineID)
	}
	return nil
}

// startGonixl starts e's side channel and handshake client in gonixl's own
// protocol.
func startGonixl(e *Engine, cfg Config, conn Connector) error {
	compat := handshake.Compat{Version: handshake.Version, Model: cfg.Model, DType: cfg.DType, Layout: compatLayout(cfg), Mode: conn.Mode}
	client, err := handshake.NewClient(cfg.EngineID, compat, cfg.HandshakeTimeout, sidechannel.DefaultMaxFrame)
	if err != nil {
		return fmt.Errorf("%w: EngineConfig: %v", conn.ErrInvalid, err)
	}
	client.SetClock(cfg.Clock.Now)
	e.client = gonixlClient{client}
	srv, err := handshake.Serve(cfg.ListenAddr, handshake.Engine{
		EngineID: cfg.EngineID, Compat: compat, TPSize: cfg.TPSize, PPSize: cfg.PPSize, BlockSize: cfg.BlockSize,
	}, handshake.ServerOptions{
		ServerOptions: sidechannel.ServerOptions{
			Logger:      cfg.Logger,
			OnMalformed: func(error) { e.stats.MalformedFrames.Inc() },
		},
		Now:       cfg.Clock.Now,
		OnExtend:  conn.OnExtend,
		OnConfirm: conn.OnConfirm,
		OnReady:   conn.OnReady,
		OnRefused: func(err error) {
			e.stats.FailedHandshakes.Inc()
			cfg.Logger.Warn(conn.Name+": refused a handshake", zap.Error(err))
		},
	})
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op // the listener's own words, without the internal package's
		}
		client.Close()
		return fmt.Errorf("%s: engine %q: side channel cannot listen on %s: %w", conn.Name, cfg.EngineID, cfg.ListenAddr, err)
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
	return nil
}
