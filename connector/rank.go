package connector

import (
	"cmp"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/nixl"
)

// Defaults for zero configuration fields of both connectors; where vLLM
// has a default, it is vLLM's. Each connector's own defaults are in its
// package.
const (
	// DefaultLease is how long prefill holds a request's finished blocks
	// for decode (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 30 s).
	DefaultLease = 30 * time.Second
	// DefaultHandshakeTimeout bounds one side-channel handshake (vLLM: 5 s).
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultPollInterval is the agent polling period while work waits
	// (vLLM's push writer polls every 1 ms).
	DefaultPollInterval = time.Millisecond
	// DefaultIdleInterval is the polling period otherwise; the native agent
	// needs progress for connection setup, and for receiving notifications,
	// even when idle.
	DefaultIdleInterval = 50 * time.Millisecond
	// DefaultStatsInterval is the period of the "KV Transfer metrics:" log
	// line when a Logger is set.
	DefaultStatsInterval = 10 * time.Second
	// DefaultEngineTTL is how long a rank keeps what it learned of a
	// remote engine it no longer transfers with (vLLM's engine_ttl).
	DefaultEngineTTL = time.Hour
)

// RankConfig is what every TP rank of either connector takes: its agent,
// its KV cache and the settings both protocols share. pullconn.Config and
// pushconn.Config embed it beside what only their protocol has. Agent and
// Layout are required; every other field has a default.
type RankConfig struct {
	// Agent is this rank's NIXL agent. The connector registers Layout's
	// memory (and the staging memory) with it on creation and deregisters
	// it on Close; the agent itself stays the caller's.
	Agent nixl.Agent
	// Layout is this rank's KV cache, a layout of the Engine's geometry
	// (descriptors.Geometry.Layout builds it).
	Layout descriptors.Layout
	// Lease (prefill) is how long finished blocks wait for decode: its
	// completions (pull) or its registration (push). Default DefaultLease.
	Lease time.Duration
	// PollInterval and IdleInterval are the agent polling periods while
	// work waits and otherwise (defaults DefaultPollInterval,
	// DefaultIdleInterval). Each hop of a transfer's end (the initiator
	// seeing it done, the target seeing its notification) waits for the
	// next poll, so on a fast link PollInterval bounds the critical path
	// (docs/gpu.md). Periods of 1 ms and more are Go timers; shorter ones
	// are kernel sleeps (nanosleep, which wakes within about 50-100 µs,
	// where a Go timer would fire after about 1 ms); periods under 50 µs
	// poll without sleeping, yielding between rounds, which keeps one CPU
	// busy while work waits.
	PollInterval time.Duration
	IdleInterval time.Duration
	// FailurePolicy (decode) is PolicyFail (default) or PolicyRecompute.
	FailurePolicy Policy
	// Clock is the time source for leases and deadlines (default: the
	// Engine's clock, EngineConfig.Clock). Give no other clock than the
	// Engine's: hold deadlines are compared through the clock offset the
	// Engine's handshake measures.
	Clock Clock
	// Logger receives warnings and the periodic metrics line (default:
	// the Engine's, EngineConfig.Logger; none when neither is set). The rank tags every line it logs with engine_id, tp_rank and
	// role itself: a logger already carrying one of those fields would
	// write it twice.
	Logger *zap.Logger
	// StatsInterval is the metrics line's period when Logger is set
	// (default DefaultStatsInterval; negative disables it). Each line
	// covers its own interval, and an interval in which nothing was
	// counted logs none (docs/metrics.md).
	StatsInterval time.Duration
	// Staging is the rank's staging memory and policy for fragmented
	// requests. The zero value stages nothing.
	Staging Staging
	// EngineTTL: a remote engine this rank has had no request with for this
	// long is forgotten when the rank next handshakes with another engine:
	// its agents' metadata is unloaded and its handshake dropped, so that a
	// fleet whose engines come and go does not accumulate them, and a later
	// request to it handshakes again (vLLM's engine_ttl). An engine with a
	// request in flight is never forgotten. Default DefaultEngineTTL;
	// negative keeps every engine.
	EngineTTL time.Duration
	// TracerProvider makes the spans of the requests the engine gives the
	// rank with a trace (Request.Context): the wait for KV, the handshake,
	// the post, each transfer, the hold (docs/metrics.md). Default: otel's
	// global provider, which drops them unless the program installed one.
	// A request without a trace records nothing.
	TracerProvider trace.TracerProvider
}

// rank validates c for a rank of e, fills its defaults in c and returns
// the internal form. The error wraps ErrInvalid (ErrClosed for a closed
// engine) and names the field.
func (c *RankConfig) rank(e *engine.Engine) (engine.Rank, error) {
	invalid := e.Invalidf
	if err := e.CheckOpen(); err != nil {
		return engine.Rank{}, err
	}
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.IdleInterval = cmp.Or(c.IdleInterval, DefaultIdleInterval)
	c.StatsInterval = cmp.Or(c.StatsInterval, DefaultStatsInterval)
	c.FailurePolicy = cmp.Or(c.FailurePolicy, PolicyFail)
	c.EngineTTL = cmp.Or(c.EngineTTL, DefaultEngineTTL)
	if c.Clock == nil {
		c.Clock = e.Config().Clock
	}
	if c.Logger == nil {
		c.Logger = e.Config().Logger // the Engine's, or a no-op one
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if err := e.CheckRank(c.Agent, c.Layout); err != nil {
		return engine.Rank{}, invalid("%v", err)
	}
	err := engine.NotNegative(
		engine.Duration{Field: "RankConfig.Lease", Value: c.Lease},
		engine.Duration{Field: "RankConfig.PollInterval", Value: c.PollInterval},
		engine.Duration{Field: "RankConfig.IdleInterval", Value: c.IdleInterval},
	)
	if err != nil {
		return engine.Rank{}, invalid("%v", err)
	}
	if c.FailurePolicy != PolicyFail && c.FailurePolicy != PolicyRecompute {
		return engine.Rank{}, invalid("RankConfig.FailurePolicy is %q, want %q or %q", c.FailurePolicy, PolicyFail, PolicyRecompute)
	}
	if e.VLLM() && c.Staging.Mode != StagingOff {
		return engine.Rank{}, invalid("RankConfig.Staging.Mode is %q: staging is gonixl's own protocol, and this engine speaks vLLM's", c.Staging.Mode)
	}
	st, err := c.Staging.prepare("RankConfig.Staging", c.Layout.Mem)
	if err != nil {
		return engine.Rank{}, invalid("%v", err)
	}
	return engine.Rank{
		Agent: c.Agent, Layout: c.Layout, Lease: c.Lease, PollInterval: c.PollInterval,
		IdleInterval: c.IdleInterval, StatsInterval: c.StatsInterval, Recompute: c.FailurePolicy == PolicyRecompute,
		Clock: c.Clock, Logger: c.Logger, Staging: st,
	}, nil
}
