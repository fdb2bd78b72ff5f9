package pushconn

import (
	"cmp"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
)

// Defaults for the zero fields of Config that only push has; the shared
// ones are connector's (connector.DefaultLease, ...). Where vLLM has a
// default, it is vLLM's.
const (
	// DefaultRegistrationTimeout bounds how long a registration waits for
	// its request to be pushed, on both sides (vLLM's
	// push_registration_timeout, from decoder_kv_blocks_ttl).
	DefaultRegistrationTimeout = 480 * time.Second
	// defaultProducerRegistrationTimeout is a Producer's default
	// registration timeout: shorter than decode's by more than two
	// handshakes and a notification, because prefill's count starts when
	// the registration arrives, after decode's started. So with the
	// defaults prefill gives a registration up (and says so with PUSH_FAIL
	// "expired") before decode's timeout can end the request and reuse its
	// blocks; PUSH_CANCEL covers the other order. Keep the rule when
	// setting either side: prefill's timeout < decode's.
	defaultProducerRegistrationTimeout = DefaultRegistrationTimeout - 30*time.Second
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
	// DefaultMaxPeers bounds the decode engines one prefill rank keeps
	// handshakes and state for.
	DefaultMaxPeers = 1024
	// DefaultMaxPendingRegistrations bounds the registrations one prefill
	// rank holds while they wait for their request or for a handshake.
	DefaultMaxPendingRegistrations = 65536
)

// Config is what a Producer or a Consumer needs for its TP rank: what
// every rank takes (connector.RankConfig: agent, layout, lease, polling,
// clock, logger, staging) and what only push has. Fields marked prefill or
// decode are read by that side only. Only Agent and Layout are required.
type Config struct {
	connector.RankConfig
	// RegistrationTimeout: on decode, how long a request waits for every
	// completion (zero means DefaultRegistrationTimeout); on prefill, how
	// long a registration waits for its request to finish (zero means
	// 450 s, DefaultRegistrationTimeout less 30 s). Prefill's must be shorter than
	// decode's, or a lost PUSH_CANCEL lets prefill WRITE into blocks
	// decode already gave up.
	RegistrationTimeout time.Duration
	// WriteTimeout (prefill) bounds a WRITE in flight. Zero means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// CancelTimeout (decode) bounds how long a request that ended
	// other than by success (a PUSH_FAIL, its registration timeout,
	// Consumer.Abort) keeps its blocks, and its Result, while decode waits
	// for every prefill rank that got its registration to have written,
	// failed or acknowledged the PUSH_CANCEL (see the package
	// documentation, "Write safety"). Keep it at least (2 x prefill's
	// WriteTimeout + a margin for notifications) x 4/3, as the default is:
	// a WRITE the agent will not release may move bytes for two write
	// timeouts, and a lost cancel is resent a quarter of this timeout
	// later. Zero means DefaultCancelTimeout. In vLLM's protocol, which
	// has no PUSH_CANCEL, it is the margin after RegistrationTimeout (counted
	// from the registration) until such a request's blocks come back
	// (the package documentation, "vLLM's protocol").
	CancelTimeout time.Duration
	// MaxPeers (prefill) bounds the decode engines the rank keeps a
	// handshake and state for; every registration from a new decode engine
	// (engine id, host, port) adds one and starts a handshake. At the limit
	// the least recently used engine with no registration, handshake or
	// WRITE of its own is forgotten; if there is none the registration is
	// refused. Zero means DefaultMaxPeers.
	MaxPeers int
	// MaxPendingRegistrations (prefill) bounds the registrations the
	// rank holds that wait for their request to finish or for a handshake
	// with their decode engine; at the limit a new one is refused. Zero
	// means DefaultMaxPendingRegistrations.
	MaxPendingRegistrations int
}

// rankConfig is a rank's configuration as the rank runs on it: the shared
// part in its internal form (engine.Rank, whose fields are the ones
// selected: Lease, Staging, Clock, ...) and push's own fields, defaults
// filled in.
type rankConfig struct {
	engine.Rank
	Config
}

// newRankConfig validates cfg for a rank of e (a Producer when prefill)
// and fills its defaults.
func newRankConfig(e *pushEngine, cfg Config, prefill bool) (rankConfig, error) {
	if err := cfg.checkSide(prefill); err != nil {
		return rankConfig{}, err
	}
	if err := checkStageRank(&cfg, prefill); err != nil {
		return rankConfig{}, err
	}
	r, err := engine.Public.Rank(&cfg.RankConfig, e.core)
	if err != nil {
		return rankConfig{}, err
	}
	c := rankConfig{Rank: r, Config: cfg}
	c.RegistrationTimeout = cmp.Or(c.RegistrationTimeout, DefaultRegistrationTimeout)
	if prefill {
		c.RegistrationTimeout = cmp.Or(cfg.RegistrationTimeout, defaultProducerRegistrationTimeout)
	}
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.CancelTimeout = cmp.Or(c.CancelTimeout, DefaultCancelTimeout)
	c.MaxPeers = cmp.Or(c.MaxPeers, DefaultMaxPeers)
	c.MaxPendingRegistrations = cmp.Or(c.MaxPendingRegistrations, DefaultMaxPendingRegistrations)
	err = engine.NotNegative(
		engine.Duration{Field: "Config.RegistrationTimeout", Value: c.RegistrationTimeout},
		engine.Duration{Field: "Config.WriteTimeout", Value: c.WriteTimeout},
		engine.Duration{Field: "Config.CancelTimeout", Value: c.CancelTimeout},
	)
	switch {
	case err != nil:
		return rankConfig{}, invalidf("%v", err)
	case c.MaxPeers < 0:
		return rankConfig{}, invalidf("Config.MaxPeers is %d, want > 0", c.MaxPeers)
	case c.MaxPendingRegistrations < 0:
		return rankConfig{}, invalidf("Config.MaxPendingRegistrations is %d, want > 0", c.MaxPendingRegistrations)
	case prefill && c.RegistrationTimeout >= DefaultRegistrationTimeout:
		return rankConfig{}, invalidf("Config.RegistrationTimeout of a Producer is %v, want less than decode's default %v (DefaultRegistrationTimeout), so prefill gives up first", c.RegistrationTimeout, DefaultRegistrationTimeout)
	}
	return c, nil
}
