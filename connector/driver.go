package connector

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// Driver is a connector as this package sees it, as database/sql/driver's
// Driver is a database: pullconn registers itself as "pull" and pushconn as
// "push" when they are imported, and an engine picks one by name
// (EngineConfig.Connector), then codes against Producer and Consumer only.
// An engine imports the connectors it may run, for their registration:
//
//	import (
//		_ "github.com/gonixl/gonixl/pullconn"
//		_ "github.com/gonixl/gonixl/pushconn"
//	)
type Driver interface {
	// NewEngine starts an engine of the driver's connector.
	NewEngine(cfg EngineConfig) (*Engine, error)
	// NewProducer and NewConsumer start a prefill or a decode rank of
	// engine e, which the driver made.
	NewProducer(e *Engine, cfg RankOptions) (Producer, error)
	NewConsumer(e *Engine, cfg RankOptions) (Consumer, error)
}

// DefaultConnector is the connector of an EngineConfig that names none:
// pull, as vLLM's NixlConnector is its default.
const DefaultConnector = "pull"

var (
	driversMu sync.Mutex
	drivers   = map[string]Driver{}
)

// Register makes driver d available by name to NewEngine. A name is taken
// once: registering it again, or a nil driver or an empty name, is refused
// with an error matching ErrInvalid and changes nothing.
func Register(name string, d Driver) error {
	driversMu.Lock()
	defer driversMu.Unlock()
	switch _, dup := drivers[name]; {
	case name == "":
		return fmt.Errorf("connector: %w: Register: the name is empty", ErrInvalid)
	case d == nil:
		return fmt.Errorf("connector: %w: Register(%q): the driver is nil", ErrInvalid, name)
	case dup:
		return fmt.Errorf("connector: %w: Register(%q): a driver of that name is registered already", ErrInvalid, name)
	}
	drivers[name] = d
	return nil
}

// Drivers returns the names of the registered drivers, sorted.
func Drivers() []string {
	driversMu.Lock()
	defer driversMu.Unlock()
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// driver returns the driver registered as name.
func driver(name string) (Driver, error) {
	driversMu.Lock()
	d := drivers[name]
	driversMu.Unlock()
	if d == nil {
		return nil, fmt.Errorf("connector: %w: EngineConfig.Connector is %q, and no connector of that name is registered (registered: %q; forgotten import of github.com/gonixl/gonixl/%sconn?)",
			ErrInvalid, name, Drivers(), name)
	}
	return d, nil
}

// NewEngine starts an engine of the connector cfg.Connector names ("pull",
// the default, or "push"), as sql.Open opens a database by its driver's
// name. Its ranks come from Engine.NewProducer and Engine.NewConsumer.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	name := cmp.Or(cfg.Connector, DefaultConnector)
	d, err := driver(name)
	if err != nil {
		return nil, err
	}
	return d.NewEngine(cfg)
}

// Connector returns the name of the engine's connector, "pull" or "push".
func (e *Engine) Connector() string { return e.connector }

// NewProducer starts a prefill rank of the engine: cfg is a RankConfig,
// or the connector's own Config that embeds one (pullconn.Config,
// pushconn.Config) for what only that connector has; another connector's
// Config is refused with an error matching ErrInvalid.
func (e *Engine) NewProducer(cfg RankOptions) (Producer, error) {
	d, err := driver(e.connector)
	if err != nil {
		return nil, err
	}
	return d.NewProducer(e, cfg)
}

// NewConsumer starts a decode rank of the engine; cfg is as NewProducer's.
func (e *Engine) NewConsumer(cfg RankOptions) (Consumer, error) {
	d, err := driver(e.connector)
	if err != nil {
		return nil, err
	}
	return d.NewConsumer(e, cfg)
}

// RankOptions are a rank's configuration: a RankConfig, or a connector's
// own Config, which embeds a RankConfig beside what only that connector
// has (pullconn.Config, pushconn.Config).
type RankOptions interface {
	rankConfig() RankConfig
}

func (c RankConfig) rankConfig() RankConfig { return c }
