package pushconn

import (
	"cmp"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/clock"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/nixl"
)

// Defaults for zero configuration fields. Where vLLM has a default, it is
// vLLM's.
const (
	// DefaultRegistrationTimeout bounds how long a registration waits for
	// its request to be pushed, on both sides (vLLM's
	// push_registration_timeout, from decoder_kv_blocks_ttl).
	DefaultRegistrationTimeout = 480 * time.Second
	// DefaultProducerRegistrationTimeout is a Producer's default
	// registration timeout: shorter than decode's by more than two
	// handshakes and a notification, because prefill's count starts when
	// the registration arrives, after decode's started. So with the
	// defaults prefill gives a registration up (and says so with PUSH_FAIL
	// "expired") before decode's timeout can end the request and reuse its
	// blocks; PUSH_CANCEL covers the other order. Keep the rule when
	// setting either side: prefill's timeout < decode's.
	DefaultProducerRegistrationTimeout = DefaultRegistrationTimeout - 30*time.Second
	// DefaultLease bounds how long prefill holds finished blocks that no
	// registration claims (vLLM's KV lease).
	DefaultLease = 30 * time.Second
	// DefaultHandshakeTimeout bounds one side-channel handshake (vLLM's).
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultWriteTimeout bounds how long a posted WRITE may stay in
	// flight before prefill cancels it and reports the failure.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultCancelTimeout bounds how long decode keeps the blocks of a
	// request that ended other than by success while it waits for every
	// prefill rank that got the registration to answer its PUSH_CANCEL.
	// A WRITE prefill posted before the cancel reached it may move bytes
	// for two write timeouts: in flight until WriteTimeout, then, if the
	// agent will not release it, until one more WriteTimeout passes. The
	// cancel itself may be lost once and reach prefill only at its first
	// resend, a quarter of this timeout later. So: (2 x WriteTimeout +
	// 10 s for the notifications) x 4/3, 93.3 s with the defaults.
	DefaultCancelTimeout = (2*DefaultWriteTimeout + 10*time.Second) * cancelResends / (cancelResends - 1)
	// DefaultPollInterval is the notification polling period while work
	// waits (vLLM's push writer polls every 1 ms).
	DefaultPollInterval = time.Millisecond
	// DefaultIdleInterval is the period at which an idle rank still
	// progresses its agent, which the native agent needs for connection
	// setup and for receiving registrations.
	DefaultIdleInterval = 50 * time.Millisecond
	// DefaultStatsInterval is the period of the "KV Transfer metrics:" log
	// line when a Logger is set.
	DefaultStatsInterval = 10 * time.Second
	// DefaultMaxPeers bounds the decode engines one prefill rank keeps
	// handshakes and state for.
	DefaultMaxPeers = 1024
	// DefaultMaxPendingRegistrations bounds the registrations one prefill
	// rank holds while they wait for their request or for a handshake.
	DefaultMaxPendingRegistrations = 65536
)

// Policy says what decode does with a request whose blocks were not
// written (vLLM's kv_load_failure_policy); pullconn has the same.
type Policy string

// Failure policies.
const (
	// PolicyFail fails the request; nothing is recomputed (vLLM's default).
	PolicyFail Policy = "fail"
	// PolicyRecompute fails the request but lists its blocks in
	// Result.InvalidBlocks, so the engine can recompute them.
	PolicyRecompute Policy = "recompute"
)

// RankConfig is what a Producer or a Consumer needs for its TP rank.
type RankConfig struct {
	// Agent is this rank's NIXL agent; the connector registers Layout's
	// memory with it and deregisters it on Close. The agent stays the
	// caller's: Close does not close it.
	Agent nixl.Agent
	// Layout is this rank's KV cache; its TPRank, TPSize and BlockSize
	// must agree with the Engine.
	Layout descriptors.Layout
	// RegistrationTimeout: on decode, how long a request waits for every
	// completion (zero means DefaultRegistrationTimeout); on prefill, how
	// long a registration waits for its request to finish (zero means
	// DefaultProducerRegistrationTimeout). Prefill's must be shorter than
	// decode's, or a lost PUSH_CANCEL lets prefill WRITE into blocks
	// decode already gave up.
	RegistrationTimeout time.Duration
	// Lease (prefill only) bounds how long finished blocks wait for their
	// registration. Zero means DefaultLease.
	Lease time.Duration
	// WriteTimeout (prefill only) bounds a WRITE in flight. Zero means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// CancelTimeout (decode only) bounds how long a request that ended
	// other than by success (a PUSH_FAIL, its registration timeout,
	// Consumer.Abort) keeps its blocks, and its Result, while decode waits
	// for every prefill rank that got its registration to have written,
	// failed or acknowledged the PUSH_CANCEL (see the package
	// documentation, "Write safety"). Keep it at least (2 x prefill's
	// WriteTimeout + a margin for notifications) x 4/3, as the default is:
	// a WRITE the agent will not release may move bytes for two write
	// timeouts, and a lost cancel is resent a quarter of this timeout
	// later. Zero means DefaultCancelTimeout.
	CancelTimeout time.Duration
	// PollInterval and IdleInterval set the agent polling periods while
	// work waits and otherwise. Zero means the defaults.
	PollInterval time.Duration
	IdleInterval time.Duration
	// FailurePolicy (decode only) is PolicyFail (default) or
	// PolicyRecompute: with recompute a failed Result lists the request's
	// blocks in InvalidBlocks (vLLM's kv_load_failure_policy).
	FailurePolicy Policy
	// Clock is the time source for deadlines (default: the Engine's
	// clock, EngineConfig.Clock).
	Clock clock.Clock
	// Logger receives errors, warnings and the periodic metrics line
	// (default: none).
	Logger *zap.Logger
	// StatsInterval is the metrics line's period when Logger is set. Zero
	// means DefaultStatsInterval; negative disables the line.
	StatsInterval time.Duration
	// MaxPeers (prefill only) bounds the decode engines the rank keeps a
	// handshake and state for; every registration from a new decode engine
	// (engine id, host, port) adds one and starts a handshake. At the limit
	// the least recently used engine with no registration, handshake or
	// WRITE of its own is forgotten; if there is none the registration is
	// refused. Zero means DefaultMaxPeers.
	MaxPeers int
	// MaxPendingRegistrations (prefill only) bounds the registrations the
	// rank holds that wait for their request to finish or for a handshake
	// with their decode engine; at the limit a new one is refused. Zero
	// means DefaultMaxPendingRegistrations.
	MaxPendingRegistrations int
	// Staging is the rank's staging memory and policy for fragmented
	// requests (see Staging). The zero value stages nothing.
	Staging Staging
}

func (c *RankConfig) withDefaults(e *Engine) {
	c.RegistrationTimeout = cmp.Or(c.RegistrationTimeout, DefaultRegistrationTimeout)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.CancelTimeout = cmp.Or(c.CancelTimeout, DefaultCancelTimeout)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.IdleInterval = cmp.Or(c.IdleInterval, DefaultIdleInterval)
	c.StatsInterval = cmp.Or(c.StatsInterval, DefaultStatsInterval)
	c.MaxPeers = cmp.Or(c.MaxPeers, DefaultMaxPeers)
	c.MaxPendingRegistrations = cmp.Or(c.MaxPendingRegistrations, DefaultMaxPendingRegistrations)
	c.FailurePolicy = cmp.Or(c.FailurePolicy, PolicyFail)
	c.Staging.WithDefaults()
	if c.Clock == nil {
		c.Clock = clock.System{}
		if e != nil && e.core != nil {
			c.Clock = e.core.Config().Clock
		}
	}
}

func (c *RankConfig) validate(e *Engine, prefill bool) error {
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
		engine.Duration{Field: "RankConfig.RegistrationTimeout", Value: c.RegistrationTimeout},
		engine.Duration{Field: "RankConfig.Lease", Value: c.Lease},
		engine.Duration{Field: "RankConfig.WriteTimeout", Value: c.WriteTimeout},
		engine.Duration{Field: "RankConfig.CancelTimeout", Value: c.CancelTimeout},
		engine.Duration{Field: "RankConfig.PollInterval", Value: c.PollInterval},
		engine.Duration{Field: "RankConfig.IdleInterval", Value: c.IdleInterval},
	)
	if err != nil {
		return invalidf("%v", err)
	}
	switch {
	case c.MaxPeers < 0:
		return invalidf("RankConfig.MaxPeers is %d, want > 0", c.MaxPeers)
	case c.MaxPendingRegistrations < 0:
		return invalidf("RankConfig.MaxPendingRegistrations is %d, want > 0", c.MaxPendingRegistrations)
	case c.FailurePolicy != PolicyFail && c.FailurePolicy != PolicyRecompute:
		return invalidf("RankConfig.FailurePolicy is %q, want %q or %q", c.FailurePolicy, PolicyFail, PolicyRecompute)
	case c.Staging.Validate("RankConfig.Staging", c.Layout.Mem) != nil:
		return invalidf("%v", c.Staging.Validate("RankConfig.Staging", c.Layout.Mem))
	case prefill && c.RegistrationTimeout >= DefaultRegistrationTimeout:
		return invalidf("RankConfig.RegistrationTimeout of a Producer is %v, want less than decode's default %v (DefaultRegistrationTimeout), so prefill gives up first", c.RegistrationTimeout, DefaultRegistrationTimeout)
	}
	return nil
}
