package loopback

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/nixl"
)

// Fabric is the network that loopback agents share: it finds agents by
// name, times transfers, injects faults and counts what happened. Fabrics
// are independent of each other; an agent can load only metadata made on its
// own fabric. A Fabric has no goroutines and is safe for concurrent use.
type Fabric struct {
	id     uint64 // tells metadata of one fabric from another's
	model  TransferModel
	clock  Clock
	log    *zap.Logger
	faults faultTable
	stats  counters

	regMu    sync.Mutex // guards agents, nextInst and closed
	agents   map[string]*Agent
	nextInst uint64
	closed   bool

	// memMu guards every agent's registered regions. Transfers hold it for
	// reading while they copy, so DeregisterMem returns only once no copy
	// touches the memory, and the memory can then be freed safely.
	memMu sync.RWMutex

	// progressMu lets one goroutine at a time carry out due work, so that
	// transfers complete, and notifications arrive, in the order they are
	// due.
	progressMu sync.Mutex
	sched      scheduler

	// Tests set these before any agent is used: testHookCopy runs before
	// each descriptor run of a copy is copied, testHookReleaseWait when a
	// ReleaseXferReq (or Close) starts waiting for a copy in progress.
	testHookCopy        func()
	testHookReleaseWait func()
}

// NewFabric returns an empty fabric.
func NewFabric(opts ...FabricOption) (*Fabric, error) {
	cfg := fabricConfig{seed: 1, clock: systemClock{}, log: zap.NewNop()}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.model.validate(); err != nil {
		return nil, err
	}
	if cfg.clock == nil {
		return nil, fmt.Errorf("loopback: WithClock: clock must not be nil")
	}
	if cfg.log == nil {
		cfg.log = zap.NewNop()
	}
	f := &Fabric{
		id:     rand.Uint64() | 1,
		model:  cfg.model,
		clock:  cfg.clock,
		log:    cfg.log,
		faults: faultTable{seed: cfg.seed},
		agents: map[string]*Agent{},
	}
	f.sched.init()
	return f, nil
}

// NewAgent creates an agent named name, unique among the fabric's open
// agents. The name of a closed agent may be used again: peers then see a new
// agent that they reach only after loading its metadata.
func (f *Fabric) NewAgent(name string, opts ...AgentOption) (*Agent, error) {
	const op = "NewAgent"
	var cfg agentConfig
	for _, o := range opts {
		o(&cfg)
	}
	if name == "" {
		return nil, nixl.NewError("loopback."+op, nixl.StatusInvalidParam, "agent needs a non-empty name")
	}
	model := f.model
	if cfg.hasModel {
		if err := cfg.model.validate(); err != nil {
			return nil, fmt.Errorf("loopback: agent %q: %w", name, err)
		}
		model = cfg.model
	}
	f.regMu.Lock()
	defer f.regMu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("loopback: NewAgent %q: fabric is closed: %w", name, nixl.ErrClosed)
	}
	if _, taken := f.agents[name]; taken {
		return nil, nixl.NewError("loopback."+op, nixl.StatusInvalidParam, "an open agent named %q already exists on this fabric", name)
	}
	f.nextInst++
	a := newAgent(f, name, f.nextInst, model)
	f.agents[name] = a
	return a, nil
}

// Close closes every agent of the fabric; NewAgent then fails with
// nixl.ErrClosed. It is idempotent.
func (f *Fabric) Close() error {
	f.regMu.Lock()
	f.closed = true
	agents := make([]*Agent, 0, len(f.agents))
	for _, a := range f.agents {
		agents = append(agents, a)
	}
	f.regMu.Unlock()
	for _, a := range agents {
		a.Close()
	}
	return nil
}

// Disconnect cuts the named agent off the fabric, as if its host dropped off
// the network: every transfer in flight to or from it fails with
// nixl.ErrRemoteDisconnect, so do new posts and GenNotif calls that involve
// it, and notifications on their way to or from it are lost. As with NIXL,
// an initiator that sees the disconnect forgets the peer's metadata and must
// load it again after Reconnect.
func (f *Fabric) Disconnect(name string) error {
	a, err := f.open("Disconnect", name)
	if err != nil {
		return err
	}
	if a.disconnected.Swap(true) {
		return nil
	}
	f.log.Debug("loopback: agent disconnected", zap.String("agent", name))
	f.purge(a, true)
	return nil
}

// Reconnect undoes Disconnect. Transfers that failed stay failed.
func (f *Fabric) Reconnect(name string) error {
	a, err := f.open("Reconnect", name)
	if err != nil {
		return err
	}
	a.disconnected.Store(false)
	f.log.Debug("loopback: agent reconnected", zap.String("agent", name))
	return nil
}

// AddFault adds a fault rule and returns its ID. Rules are consulted in the
// order they were added; for each event the first matching rule of a kind
// that fires decides.
func (f *Fabric) AddFault(flt Fault) (RuleID, error) { return f.faults.add(flt) }

// RemoveFault removes a rule; Injected still reports its count. It reports
// whether the rule was present.
func (f *Fabric) RemoveFault(id RuleID) bool { return f.faults.remove(id) }

// Injected returns how many events the rule has hit.
func (f *Fabric) Injected(id RuleID) int { return f.faults.injected(id) }

// Counters returns a snapshot of the fabric's counters.
func (f *Fabric) Counters() Counters { return f.stats.snapshot() }

// open returns the open agent named name.
func (f *Fabric) open(op, name string) (*Agent, error) {
	f.regMu.Lock()
	defer f.regMu.Unlock()
	if a, ok := f.agents[name]; ok {
		return a, nil
	}
	return nil, nixl.NewError("loopback."+op, nixl.StatusNotFound, "no open agent named %q on this fabric", name)
}

// lookup returns the open agent named name if it is the instance inst, or
// nil: a peer that closed, or closed and came back under the same name, is
// gone for those that knew the old one.
func (f *Fabric) lookup(name string, inst uint64) *Agent {
	f.regMu.Lock()
	defer f.regMu.Unlock()
	if a, ok := f.agents[name]; ok && a.inst == inst {
		return a
	}
	return nil
}

func (f *Fabric) remove(a *Agent) {
	f.regMu.Lock()
	defer f.regMu.Unlock()
	if f.agents[a.name] == a {
		delete(f.agents, a.name)
	}
}

// reachable reports whether a and b can exchange data.
func reachable(a, b *Agent) bool {
	return !a.closed.Load() && !b.closed.Load() && !a.disconnected.Load() && !b.disconnected.Load()
}

// systemClock is the wall clock, the fabric's default.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
