package engine

import (
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/lease"
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
}
