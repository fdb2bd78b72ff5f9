package pullconn

import (
	"cmp"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
)

// Defaults for the zero fields of Config that only pull has; the shared
// ones are connector's (connector.DefaultLease, ...).
const (
	// DefaultTransferTimeout bounds a READ in flight on decode.
	DefaultTransferTimeout = 30 * time.Second
	// DefaultExpiryMargin is Config.ExpiryMargin's default.
	DefaultExpiryMargin = time.Second
	// DefaultKeepAliveTimeout bounds KeepAlive without Load (vLLM's decode keeps
	// blocks for a remote prefill up to 480 s).
	DefaultKeepAliveTimeout = 480 * time.Second
)

// Config is what a Producer or a Consumer needs for its TP rank: what
// every rank takes (connector.RankConfig: agent, layout, lease, polling,
// clock, logger, staging) and what only pull has. Fields marked prefill or
// decode are read by that side only. Only Agent and Layout are required.
type Config struct {
	connector.RankConfig
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
	// Inline (decode) maps descriptors and posts READs on the goroutine
	// that calls Load (or, for requests that waited for a handshake,
	// Drain), as vLLM does in its engine loop, instead of on the reader
	// goroutine.
	Inline bool
	// ParamsAfterAllRanks, on a prefill rank with Staging, promises that
	// the engine hands a request's Params to decode only after
	// RequestFinished returned on every one of its TP ranks, as a
	// scheduler that collects its workers' results does (examples/engine
	// does). Only then does a prefill engine of several ranks stage:
	// decode asks each rank how far its gather into its slot got (started
	// in RequestFinished), and a rank whose RequestFinished has not run
	// yet has no such hold to answer for. Every rank of the engine must
	// say the same; it changes nothing for an engine of one rank.
	ParamsAfterAllRanks bool
}

// rankConfig is a rank's configuration as the rank runs on it: the shared
// part in its internal form (engine.Rank, whose fields are the ones
// selected: Lease, Staging, Clock, ...) and pull's own fields, defaults
// filled in.
type rankConfig struct {
	engine.Rank
	Config
}

// newRankConfig validates cfg for a rank of e and fills its defaults.
func newRankConfig(e *pullEngine, cfg Config) (rankConfig, error) {
	r, err := engine.Public.Rank(&cfg.RankConfig, e.core)
	if err != nil {
		return rankConfig{}, err
	}
	c := rankConfig{Rank: r, Config: cfg}
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, c.Lease/6)
	c.HeartbeatExtension = cmp.Or(c.HeartbeatExtension, c.Lease*2/3)
	c.TransferTimeout = cmp.Or(c.TransferTimeout, DefaultTransferTimeout)
	c.ExpiryMargin = cmp.Or(c.ExpiryMargin, DefaultExpiryMargin)
	c.KeepAliveTimeout = cmp.Or(c.KeepAliveTimeout, DefaultKeepAliveTimeout)
	err = engine.NotNegative(
		engine.Duration{Field: "Config.TransferTimeout", Value: c.TransferTimeout},
		engine.Duration{Field: "Config.ExpiryMargin", Value: c.ExpiryMargin},
		engine.Duration{Field: "Config.KeepAliveTimeout", Value: c.KeepAliveTimeout},
	)
	switch {
	case err != nil:
		return rankConfig{}, invalidf("%v", err)
	case c.HeartbeatInterval <= 0:
		return rankConfig{}, invalidf("Config.HeartbeatInterval is %v, want > 0", c.HeartbeatInterval)
	case c.HeartbeatInterval >= c.Lease:
		return rankConfig{}, invalidf("Config.HeartbeatInterval %v must be shorter than RankConfig.Lease %v", c.HeartbeatInterval, c.Lease)
	case c.HeartbeatExtension <= 0:
		return rankConfig{}, invalidf("Config.HeartbeatExtension is %v, want > 0", c.HeartbeatExtension)
	}
	return c, nil
}
