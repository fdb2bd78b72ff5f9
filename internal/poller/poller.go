package poller

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// Handler receives one notification from the agent named sender. It runs
// on the poller goroutine and must not block. msg is the handler's to keep:
// the poller does not reuse it.
type Handler func(sender string, msg []byte)

// Options configure a Poller. Zero fields take the defaults below.
type Options struct {
	// Interval is the polling period while Busy reports true (default 1ms).
	Interval time.Duration
	// IdleInterval is the polling period otherwise (default 50ms); the
	// agent is still progressed, which the native agent needs for
	// connection setup.
	IdleInterval time.Duration
	// Busy reports whether the owner has work in flight; nil means always.
	Busy func() bool
	// Tick runs after each round of notifications, on the poller goroutine.
	Tick func()
	// OnError receives errors fetching notifications; the poller keeps
	// going.
	OnError func(error)
}

// Defaults for zero Options fields.
const (
	DefaultInterval     = time.Millisecond
	DefaultIdleInterval = 50 * time.Millisecond
)

// Poller progresses one agent on its own goroutine.
type Poller struct {
	agent nixl.Agent
	opts  Options

	mu     sync.RWMutex
	routes []route // longest prefix first
	other  Handler

	wmu     sync.Mutex
	watches []watch // in the order watched

	// round is the state of Round, reused from round to round.
	round roundState

	wake      chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup
	startOnce sync.Once
	stopOnce  sync.Once
}

type route struct {
	prefix string
	h      Handler
}

// New returns a stopped poller for agent.
func New(agent nixl.Agent, opts Options) *Poller {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.IdleInterval <= 0 {
		opts.IdleInterval = DefaultIdleInterval
	}
	return &Poller{agent: agent, opts: opts, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Handle routes notifications that start with prefix to h; the longest
// matching prefix wins. Prefix "" sets the handler for everything else (by
// default such notifications are dropped). Registering a prefix again
// replaces its handler.
func (p *Poller) Handle(prefix string, h Handler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if prefix == "" {
		p.other = h
		return
	}
	for i := range p.routes {
		if p.routes[i].prefix == prefix {
			p.routes[i].h = h
			return
		}
	}
	p.routes = append(p.routes, route{prefix, h})
	sort.SliceStable(p.routes, func(i, j int) bool { return len(p.routes[i].prefix) > len(p.routes[j].prefix) })
}

// Start launches the poller goroutine; calling it again does nothing.
func (p *Poller) Start() {
	p.startOnce.Do(func() {
		p.wg.Add(1)
		go p.run()
	})
}

// Wake makes the poller run a round now instead of at its next period. It
// never blocks.
func (p *Poller) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Stop ends the goroutine and waits for it, so no handler or Tick runs after
// Stop returns. It is idempotent, and safe on a poller never started.
func (p *Poller) Stop() {
	p.stopOnce.Do(func() { close(p.done) })
	p.wg.Wait()
}

func (p *Poller) run() {
	defer p.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		default:
		}
		p.Round()
		d := p.opts.IdleInterval
		if p.opts.Busy == nil || p.opts.Busy() {
			d = p.opts.Interval
		}
		if d < timerFloor {
			if p.nap(d) {
				return
			}
			continue
		}
		t.Reset(d)
		select {
		case <-p.done:
			return
		case <-p.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// Round polls the watched transfers and fetches the agent's notifications,
// then reports finished transfers to their Watch callbacks, routes the
// notifications, and runs Tick. When the agent implements nixl.BatchPoller
// all of that polling is one Poll call (one cgo crossing on the native
// agent); otherwise it is one XferStatus per watched transfer and one
// GetNotifs, the same NIXL calls in the same order. The poller goroutine
// calls it; tests may call it directly on a poller that was never started.
func (p *Poller) Round() {
	r := &p.round
	r.mu.Lock()
	defer r.mu.Unlock()
	p.snapshotWatches(r)
	notifs, err := p.pollAgent(r)
	if err != nil {
		if p.opts.OnError != nil && !errors.Is(err, nixl.ErrClosed) {
			p.opts.OnError(err)
		}
	}
	p.finishWatches(r)
	if len(notifs) > 0 {
		p.dispatch(notifs)
	}
	r.clearInbox()
	if p.opts.Tick != nil {
		p.opts.Tick()
	}
}

func (p *Poller) dispatch(notifs nixl.Notifs) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	senders := p.round.senders[:0]
	for s, msgs := range notifs {
		if len(msgs) > 0 {
			senders = append(senders, s)
		}
	}
	sort.Strings(senders) // deterministic order across senders
	p.round.senders = senders
	for _, s := range senders {
		for _, msg := range notifs[s] {
			if h := p.lookup(msg); h != nil {
				h(s, msg)
			}
		}
	}
}

func (p *Poller) lookup(msg []byte) Handler {
	for _, r := range p.routes {
		if len(msg) >= len(r.prefix) && strings.HasPrefix(string(msg[:len(r.prefix)]), r.prefix) {
			return r.h
		}
	}
	return p.other
}
