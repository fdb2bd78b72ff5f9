package pushconn

import (
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/engine"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// Defaults for zero configuration fields. Where vLLM has a default, it is
// vLLM's.
const (
	// DefaultRegistrationTimeout bounds how long a registration waits for
	// its request to be pushed, on both sides (vLLM's
	// push_registration_timeout, from decoder_kv_blocks_ttl).
	DefaultRegistrationTimeout = 480 * time.Second
	// DefaultLease bounds how long prefill holds finished blocks that no
	// registration claims (vLLM's KV lease).
	DefaultLease = 30 * time.Second
	// DefaultHandshakeTimeout bounds one side-channel handshake (vLLM's).
	DefaultHandshakeTimeout = engine.DefaultHandshakeTimeout
	// DefaultWriteTimeout bounds how long a posted WRITE may stay in
	// flight before prefill cancels it and reports the failure.
	DefaultWriteTimeout = 30 * time.Second
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
)

// RankConfig is what a Producer or a Consumer needs for its TP rank.
type RankConfig struct {
	// Agent is this rank's NIXL agent; the connector registers Layout's
	// memory with it and deregisters it on Close. The agent stays the
	// caller's: Close does not close it.
	Agent nixl.Agent
	// Layout is this rank's KV cache; its TPRank, TPSize and BlockTokens
	// must agree with the Engine.
	Layout descriptors.Layout
	// RegistrationTimeout: on decode, how long a request waits for every
	// completion; on prefill, how long a registration waits for its
	// request to finish. Zero means DefaultRegistrationTimeout.
	RegistrationTimeout time.Duration
	// Lease (prefill only) bounds how long finished blocks wait for their
	// registration. Zero means DefaultLease.
	Lease time.Duration
	// WriteTimeout (prefill only) bounds a WRITE in flight. Zero means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// PollInterval and IdleInterval set the agent polling periods while
	// work waits and otherwise. Zero means the defaults.
	PollInterval time.Duration
	IdleInterval time.Duration
	// Clock is the time source for deadlines (default: the wall clock).
	Clock Clock
	// Logger receives errors, warnings and the periodic metrics line
	// (default: none).
	Logger *zap.Logger
	// StatsInterval is the metrics line's period when Logger is set. Zero
	// means DefaultStatsInterval; negative disables the line.
	StatsInterval time.Duration
}

func (c *RankConfig) withDefaults() {
	if c.RegistrationTimeout == 0 {
		c.RegistrationTimeout = DefaultRegistrationTimeout
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.IdleInterval == 0 {
		c.IdleInterval = DefaultIdleInterval
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = DefaultStatsInterval
	}
}

func (c *RankConfig) validate(e *Engine) error {
	switch {
	case c.Agent == nil:
		return invalidf("RankConfig.Agent is nil")
	case c.RegistrationTimeout < 0:
		return invalidf("RankConfig.RegistrationTimeout is negative (%v)", c.RegistrationTimeout)
	case c.Lease < 0:
		return invalidf("RankConfig.Lease is negative (%v)", c.Lease)
	case c.WriteTimeout < 0:
		return invalidf("RankConfig.WriteTimeout is negative (%v)", c.WriteTimeout)
	case c.PollInterval < 0 || c.IdleInterval < 0:
		return invalidf("RankConfig.PollInterval (%v) and IdleInterval (%v) must not be negative", c.PollInterval, c.IdleInterval)
	case c.Layout.TPSize != e.TPSize():
		return invalidf("RankConfig.Layout.TPSize is %d, engine %q has TP size %d", c.Layout.TPSize, e.ID(), e.TPSize())
	case c.Layout.BlockTokens != e.core.Config().BlockSize:
		return invalidf("RankConfig.Layout.BlockTokens is %d, engine %q has block size %d", c.Layout.BlockTokens, e.ID(), e.core.Config().BlockSize)
	}
	if err := c.Layout.Validate(); err != nil {
		return invalidf("RankConfig.Layout: %v", err)
	}
	return nil
}
