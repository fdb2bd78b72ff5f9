package engine

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/lease"
	"github.com/gonixl/gonixl/internal/poller"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
)

// Rank is the part of a rank's configuration that both connectors read
// (the public connector.RankConfig), validated, with its defaults filled
// in and its staging in the form the staging machinery runs on.
type Rank struct {
	Agent         nixl.Agent
	Layout        descriptors.Layout
	Lease         time.Duration
	PollInterval  time.Duration
	IdleInterval  time.Duration
	StatsInterval time.Duration
	// Recompute is the recompute failure policy (connector.PolicyRecompute).
	Recompute bool
	Clock     lease.Clock
	Logger    *zap.Logger
	Staging   staging.Config
}

// Public is how the connectors reach what the public types of package
// connector hold: connector sets these when it is initialized, and it is
// imported by every connector, so they are set before a connector runs.
// They take and return the public types as any because internal/ never
// imports the public base it serves.
var Public struct {
	// Start validates a connector.EngineConfig, starts the engine for
	// connector conn and returns it as a *connector.Engine.
	Start func(cfg any, conn Connector) (any, error)
	// Engine returns the engine inside a *connector.Engine; nil for a nil
	// one.
	Engine func(e any) *Engine
	// Rank validates a *connector.RankConfig for a rank of e, fills its
	// defaults in place and returns its internal form. Errors name the
	// field and wrap conn.ErrInvalid (or ErrClosed for a closed engine).
	Rank func(cfg any, e *Engine) (Rank, error)
	// Stats returns a snapshot as connector.Stats.
	Stats func(s stats.Snapshot) any
	// Params returns the connector.TransferParams by which a decode
	// engine finds request id's blocks on prefill engine e (a copy of
	// blocks: the caller's to change).
	Params func(e *Engine, id string, blocks []int) any
}

// Poller returns the rank's poller over its agent at its polling periods;
// a failed poll is logged on log, prefixed with the connector's name.
func (r Rank) Poller(name string, log *zap.Logger, busy func() bool, tick func()) *poller.Poller {
	return poller.New(r.Agent, poller.Options{
		Interval: r.PollInterval, IdleInterval: r.IdleInterval, Busy: busy, Tick: tick,
		OnError: func(err error) { log.Warn(name+": polling the agent failed", zap.Error(err)) },
	})
}

// StatsOf returns a rank's counters as the public connector.Stats, S.
func StatsOf[S any](s *stats.Set) S { return Public.Stats(s.Snapshot()).(S) }

// StartPublic starts the engine of connector conn from a
// connector.EngineConfig and returns it as the public *connector.Engine, P,
// and as itself.
func StartPublic[P any](cfg any, conn Connector) (P, *Engine, error) {
	var none P
	pub, err := Public.Start(cfg, conn)
	if err != nil {
		return none, nil, err
	}
	return pub.(P), Public.Engine(pub), nil
}

// StateOf returns the state of connector name (S, its Connector.State) in
// public engine e, or an error wrapping errInvalid that says e is nil or was
// made by another connector.
func StateOf[S any](e any, name string, errInvalid error) (S, error) {
	var none S
	core := Public.Engine(e)
	if core == nil {
		return none, fmt.Errorf("%w: engine is nil: create it with %s.NewEngine", errInvalid, name)
	}
	s, ok := core.State().(S)
	if !ok {
		return none, fmt.Errorf("%w: engine %q was made by %s.NewEngine: a %s rank needs one from %s.NewEngine",
			errInvalid, core.Config().EngineID, core.Name(), strings.TrimSuffix(name, "conn"), name)
	}
	return s, nil
}

// Log returns the rank's logger, tagged as the metrics line is: engine_id,
// tp_rank and role ("prefill" or "decode").
func (r Rank) Log(engineID, role string) *zap.Logger {
	return r.Logger.With(zap.String("engine_id", engineID), zap.Int("tp_rank", r.Layout.TPRank), zap.String("role", role))
}
