package pullconn

import (
	"cmp"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/clock"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/nixl"
)

// Defaults for zero configuration fields; where vLLM has a default, it is
// vLLM's.
const (
	// DefaultLease is how long prefill holds a request's blocks for decode
	// (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 30 s).
	DefaultLease = 30 * time.Second
	// DefaultHandshakeTimeout bounds one side-channel handshake (vLLM: 5 s).
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultTransferTimeout bounds a READ in flight on decode.
	DefaultTransferTimeout = 30 * time.Second
	// DefaultPollInterval is the agent polling period while transfers or
	// leases are pending.
	DefaultPollInterval = time.Millisecond
	// DefaultIdleInterval is the polling period otherwise; the native
	// agent needs progress for connection setup even when idle.
	DefaultIdleInterval = 50 * time.Millisecond
	// DefaultStatsInterval is the period of the "KV Transfer metrics:"
	// line when a Logger is set.
	DefaultStatsInterval = 10 * time.Second
	// DefaultExpiryMargin is RankConfig.ExpiryMargin's default.
	DefaultExpiryMargin = time.Second
	// DefaultKeepAliveTimeout bounds KeepAlive without Load (vLLM's decode keeps
	// blocks for a remote prefill up to 480 s).
	DefaultKeepAliveTimeout = 480 * time.Second
)

// Policy says what decode does with a request whose blocks could not be
// read (vLLM's kv_load_failure_policy).
type Policy string

// Failure policies.
const (
	// PolicyFail fails the request; nothing is recomputed (vLLM's default).
	PolicyFail Policy = "fail"
	// PolicyRecompute fails the load but reports the local blocks whose
	// content is invalid, so the engine can recompute them.
	PolicyRecompute Policy = "recompute"
)

// RankConfig is what a Producer or a Consumer needs for its TP rank. Fields
// marked prefill or decode are read by that side only.
type RankConfig struct {
	// Agent is this rank's NIXL agent. The connector registers Layout's
	// memory with it on creation and deregisters it on Close; the agent
	// itself stays the caller's.
	Agent nixl.Agent
	// Layout is this rank's KV cache; TPSize and BlockSize must equal
	// the engine's.
	Layout descriptors.Layout
	// Lease (prefill) is how long finished blocks wait for decode's
	// completions (default DefaultLease).
	Lease time.Duration
	// HeartbeatInterval (decode) is how often decode sends "HB:" for its
	// pending requests (default Lease/6, as vLLM).
	HeartbeatInterval time.Duration
	// HeartbeatExtension (prefill) is how far a heartbeat pushes a lease
	// from the time it arrives (default 2/3 of Lease, as vLLM).
	HeartbeatExtension time.Duration
	// TransferTimeout (decode) bounds a READ in flight (default
	// DefaultTransferTimeout).
	TransferTimeout time.Duration
	// ExpiryMargin (decode) is how long before prefill's hold deadline, on
	// top of the handshake's clock-offset uncertainty, decode stops
	// trusting the hold: no READ is posted or finished later (default
	// DefaultExpiryMargin). It covers clock drift between the engines since
	// the handshake measured their offset.
	ExpiryMargin time.Duration
	// KeepAliveTimeout (decode) bounds how long a request registered with KeepAlive
	// keeps prefill's blocks alive with heartbeats without a Load or Abort
	// following (default DefaultKeepAliveTimeout).
	KeepAliveTimeout time.Duration
	// FailurePolicy (decode) is PolicyFail (default) or PolicyRecompute.
	FailurePolicy Policy
	// Inline (decode) maps descriptors and posts READs on the goroutine
	// that calls Load (or, for requests that waited for a handshake,
	// Drain), as vLLM does in its engine loop, instead of on the reader
	// goroutine.
	Inline bool
	// PollInterval and IdleInterval are the agent polling periods while
	// work is pending and otherwise (defaults DefaultPollInterval,
	// DefaultIdleInterval).
	PollInterval time.Duration
	IdleInterval time.Duration
	// Clock is the time source for leases and deadlines (default: the
	// Engine's clock, EngineConfig.Clock). Use no other clock than the
	// Engine's: hold deadlines are compared through the clock offset the
	// Engine's handshake measures.
	Clock clock.Clock
	// Logger receives warnings and the periodic metrics line (default: none).
	Logger *zap.Logger
	// StatsInterval is the metrics line's period when Logger is set
	// (default DefaultStatsInterval; negative disables it).
	StatsInterval time.Duration
	// Staging is the rank's staging memory and policy for fragmented
	// requests (see Staging). The zero value stages nothing.
	Staging Staging
	// ParamsAfterAllRanks, on a prefill rank with Staging, promises that
	// the engine hands a request's Params to decode only after
	// RequestFinished returned on every one of its TP ranks, as a
	// scheduler that collects its workers' results does (examples/engine
	// does). Only then does a prefill engine of several ranks stage: a
	// rank's staging slot holds the request from its gather in
	// RequestFinished, not from the end of the forward pass. Every rank of
	// the engine must say the same; it changes nothing for an engine of
	// one rank.
	ParamsAfterAllRanks bool
}

func (c *RankConfig) withDefaults(e *Engine) {
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, c.Lease/6)
	c.HeartbeatExtension = cmp.Or(c.HeartbeatExtension, c.Lease*2/3)
	c.TransferTimeout = cmp.Or(c.TransferTimeout, DefaultTransferTimeout)
	c.FailurePolicy = cmp.Or(c.FailurePolicy, PolicyFail)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.IdleInterval = cmp.Or(c.IdleInterval, DefaultIdleInterval)
	c.StatsInterval = cmp.Or(c.StatsInterval, DefaultStatsInterval)
	c.ExpiryMargin = cmp.Or(c.ExpiryMargin, DefaultExpiryMargin)
	c.KeepAliveTimeout = cmp.Or(c.KeepAliveTimeout, DefaultKeepAliveTimeout)
	c.Staging.WithDefaults()
	if c.Clock == nil {
		c.Clock = clock.System{}
		if e != nil && e.core != nil {
			c.Clock = e.core.Config().Clock
		}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// validate runs after withDefaults, so zero means the user wrote a
// negative number or an unknown word.
func (c *RankConfig) validate(e *Engine) error {
	if e == nil || e.core == nil {
		return invalidf("engine is nil: create it with NewEngine")
	}
	if err := e.core.CheckOpen(); err != nil {
		return err
	}
	if err := e.core.CheckRank(c.Agent, c.Layout); err != nil {
		return invalidf("%v", err)
	}
	err := engine.NotNegative(
		engine.Duration{Field: "RankConfig.Lease", Value: c.Lease},
		engine.Duration{Field: "RankConfig.TransferTimeout", Value: c.TransferTimeout},
		engine.Duration{Field: "RankConfig.PollInterval", Value: c.PollInterval},
		engine.Duration{Field: "RankConfig.IdleInterval", Value: c.IdleInterval},
		engine.Duration{Field: "RankConfig.ExpiryMargin", Value: c.ExpiryMargin},
		engine.Duration{Field: "RankConfig.KeepAliveTimeout", Value: c.KeepAliveTimeout},
	)
	if err != nil {
		return invalidf("%v", err)
	}
	switch {
	case c.HeartbeatInterval <= 0:
		return invalidf("RankConfig.HeartbeatInterval is %v, want > 0", c.HeartbeatInterval)
	case c.HeartbeatInterval >= c.Lease:
		return invalidf("RankConfig.HeartbeatInterval %v must be shorter than RankConfig.Lease %v", c.HeartbeatInterval, c.Lease)
	case c.HeartbeatExtension <= 0:
		return invalidf("RankConfig.HeartbeatExtension is %v, want > 0", c.HeartbeatExtension)
	case c.FailurePolicy != PolicyFail && c.FailurePolicy != PolicyRecompute:
		return invalidf("RankConfig.FailurePolicy is %q, want %q or %q", c.FailurePolicy, PolicyFail, PolicyRecompute)
	case c.Staging.Validate("RankConfig.Staging", c.Layout.Mem) != nil:
		return invalidf("%v", c.Staging.Validate("RankConfig.Staging", c.Layout.Mem))
	case c.Layout.DType != e.core.Config().DType:
		return invalidf("RankConfig.Layout.DType is %q, engine %q has dtype %q", c.Layout.DType, e.ID(), e.core.Config().DType)
	}
	return nil
}
