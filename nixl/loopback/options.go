package loopback

import (
	"time"

	"go.uber.org/zap"
)

// FabricOption configures NewFabric.
type FabricOption func(*fabricConfig)

type fabricConfig struct {
	model TransferModel
	seed  uint64
	clock Clock
	log   *zap.Logger
}

// WithModel sets the transfer model of every agent that does not set its
// own with AgentModel. The default is Instant.
func WithModel(m TransferModel) FabricOption { return func(c *fabricConfig) { c.model = m } }

// WithSeed seeds the fault rules' random draws (default 1). Log the seed of
// a failing randomized test to replay it.
func WithSeed(seed uint64) FabricOption { return func(c *fabricConfig) { c.seed = seed } }

// Clock tells the fabric the time; connector.Clock satisfies it, so one
// clock (a connector.ManualClock in tests) drives the fabric and the
// connectors alike.
type Clock interface {
	Now() time.Time
}

// WithClock sets the clock that decides when transfers and delayed
// notifications are due (default: the wall clock). A connector.ManualClock
// makes timing tests exact.
func WithClock(clk Clock) FabricOption { return func(c *fabricConfig) { c.clock = clk } }

// WithLogger sets the logger for injected faults and disconnects (default:
// none).
func WithLogger(l *zap.Logger) FabricOption { return func(c *fabricConfig) { c.log = l } }

// AgentOption configures Fabric.NewAgent.
type AgentOption func(*agentConfig)

type agentConfig struct {
	model    TransferModel
	hasModel bool
}

// AgentModel sets the transfer model of the transfers and notifications the
// agent initiates, instead of the fabric's, e.g. to model one slow link.
func AgentModel(m TransferModel) AgentOption {
	return func(c *agentConfig) { c.model, c.hasModel = m, true }
}
