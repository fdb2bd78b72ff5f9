package pullconn

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/lease"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/poller"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/internal/tracing"
	"github.com/gonixl/gonixl/internal/xfertime"
)

// Consumer is one decode TP rank: it loads requests' blocks from prefill
// engines. Load and Drain never wait for the network; a reader goroutine
// (the poller) handshakes, posts READs (unless Inline), polls them and sends
// heartbeats. All methods are safe for concurrent use.
type Consumer struct {
	// The protocol is rd, the reader (reader.go), a state machine fed
	// events; the Consumer is the shell around it: the engine-facing
	// calls, the goroutines of the side channel, the locks, the agent.
	e       *pullEngine
	cfg     rankConfig
	stats   *stats.Set
	rejects *stats.Counter
	log     *zap.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	hsWG    sync.WaitGroup // side-channel goroutines
	poll    *poller.Poller
	stopLog func()
	readyCh chan struct{}

	// Engine-facing state. Lock order: wmu before qmu.
	qmu     sync.Mutex
	closed  bool
	live    map[string]struct{} // requests not yet ended
	queue   []*load             // submitted, not yet seen by the reader
	hsDone  []handshakeDone
	queried []holdAnswer
	readied []readyAnswer
	results []connector.Result
	waiting map[string]*waiter // KeepAlive-registered, heartbeats only
	guard   readGuard

	// wmu guards rd: the reader goroutine's, and the caller's too in
	// Inline mode.
	wmu sync.Mutex
	rd  *reader

	aborted, waitTimeouts        *stats.Counter
	confirmations, confirmMicros *stats.Counter
}

// NewConsumer registers cfg.Layout's memory with cfg.Agent and starts the
// rank's reader goroutine.
func NewConsumer(pub *connector.Engine, config Config) (*Consumer, error) {
	e, err := engineOf(pub)
	if err != nil {
		return nil, err
	}
	if err := config.checkSide(false); err != nil {
		return nil, err
	}
	cfg, err := newRankConfig(e, config)
	if err != nil {
		return nil, err
	}
	if err := e.core.Claim("consumer", cfg.Layout.TPRank); err != nil {
		return nil, err
	}
	if err := cfg.Agent.RegisterMem(cfg.Layout.RegList(), nil); err != nil {
		e.core.Release("consumer", cfg.Layout.TPRank)
		return nil, err
	}
	if cfg.Staging.Enabled() {
		if err := cfg.Agent.RegisterMem(cfg.Staging.RegList(), nil); err != nil {
			_ = cfg.Agent.DeregisterMem(cfg.Layout.RegList(), nil)
			e.core.Release("consumer", cfg.Layout.TPRank)
			return nil, err
		}
	}
	c := &Consumer{e: e, cfg: cfg, stats: stats.New(),
		log:     cfg.Log(e.ID(), "decode"),
		live:    map[string]struct{}{},
		waiting: map[string]*waiter{},
		readyCh: make(chan struct{}, 1),
	}
	c.stats.SetGroups(cfg.Layout.GroupKinds())
	c.rd = newReader(&c.cfg, agentTransfers{cfg.Agent}, c, c.log, c.stats)
	rd := c.rd
	rd.vllm, rd.hsTimeout = e.core.VLLM(), e.core.Config().HandshakeTimeout
	rd.now, rd.mono, rd.steady = cfg.Clock.Now, lease.MonoNow(cfg.Clock), time.Now
	c.rejects = c.stats.Counter("rejected_loads", "Load or KeepAlive calls refused for invalid arguments.")
	c.aborted = c.stats.Counter("aborted_requests", "Requests the engine aborted (Abort).")
	c.guard = newReadGuard(c.stats.Counter("read_guards_forgotten", "Read remote requests forgotten over the bound before their deadline (a re-load of one is no longer refused)."))
	c.waitTimeouts = c.stats.Counter("keepalive_timeouts", "KeepAlive registrations dropped: Config.KeepAliveTimeout passed without a Load, or the prefill engine's handshake failed.")
	rd.eng.regenerations = c.stats.Counter("registration_rehandshakes", "Handshakes with a prefill engine forgotten because a request named a higher registration generation (vLLM's remote_registration_generation: prefill registered its KV cache anew).")
	rd.eng.forgotten = c.stats.Counter("forgotten_engines", "Prefill engines forgotten after RankConfig.EngineTTL without a request (their metadata unloaded; the next request handshakes again).")
	rd.restart.count = c.stats.Counter("restart_rehandshakes", "Handshakes with a prefill engine made again for a load because the engine restarted at its address (its Params name another incarnation than the handshake, or a READ found its agent gone and the load is retried once).")
	rd.stuck = c.stats.Counter("stuck_transfers", "Ended loads whose READ the agent would not release within the transfer timeout.")
	rd.holdQueries = c.stats.Counter("hold_queries", "Hold queries answered by prefill engines (their holds extended, their deadlines told).")
	rd.pins.notHeld = c.stats.Counter("not_held", "Loads failed with ErrNotHeld: prefill did not pin the hold the Params name for this engine, or the READs outlasted the pin.")
	c.confirmations = c.stats.Counter("confirmations", "Pin exchanges with prefill engines, one per engine and reader round for the loads whose READs were posted.")
	c.confirmMicros = c.stats.Counter("confirmation_microseconds", "Time spent waiting for confirmations, in microseconds (divide by confirmations for the mean round trip).")
	rd.failedQueries = c.stats.Counter("failed_hold_queries", "Hold queries that failed; the loads keep the deadlines they had.")
	rd.times, rd.spans = xfertime.New(cfg.Agent, c.stats), tracing.New(cfg.TracerProvider)
	if cfg.Staging.Enabled() {
		rd.stage.pool = staging.NewPool(cfg.Staging.Base, cfg.Staging.SlotBytes, cfg.Staging.Slots)
		rd.stage.stage, rd.stage.model = staging.NewCounters(c.stats), staging.NewModel(&cfg.Staging)
		rd.stage.readiness = newReadyCounters(c.stats)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.poll = cfg.Poller("pullconn", c.log, c.busy, c.tick)
	// Pull decode expects no notifications; count whatever comes.
	c.poll.Handle("", func(sender string, msg []byte) { c.stats.UnknownNotifications.Inc() })
	c.poll.Start()
	c.stopLog = engine.StartStatsLog(cfg.Logger, cfg.StatsInterval, c.stats, e.ID(), cfg.Layout.TPRank, "decode")
	return c, nil
}

// Load starts loading request requestID, prefilled remotely as p says, into
// localBlocks (the decode blocks still to fill, in token order, after any
// prefix hit). It returns at once; the request's end comes out of Drain,
// exactly once. An empty localBlocks means decode already has every block:
// only the completions are sent. Invalid arguments and a request id still
// loading are refused with an error and change nothing.
func (c *Consumer) Load(requestID string, p Params, localBlocks []int) error {
	if len(c.cfg.Layout.Groups) > 0 {
		c.rejects.Inc()
		return invalidf("request %q: the layout has %d KV-cache groups: use LoadGroups", requestID, len(c.cfg.Layout.Groups))
	}
	if p.RemoteGroupBlockIDs != nil {
		if len(p.RemoteGroupBlockIDs) != 1 || p.RemoteBlockIDs != nil {
			c.rejects.Inc()
			return invalidf("request %q: Params.RemoteBlockIDs has %d KV-cache groups, the layout one: use a grouped layout and LoadGroups", requestID, len(p.RemoteGroupBlockIDs))
		}
		// vLLM's Params list one group as a list of one list.
		p.RemoteBlockIDs, p.RemoteGroupBlockIDs = p.RemoteGroupBlockIDs[0], nil
	}
	l, err := c.newLoad(requestID, &p, localBlocks)
	if err != nil {
		c.rejects.Inc()
		return err
	}
	return c.startLoad(requestID, p, l)
}

// startLoad queues a checked load.
func (c *Consumer) startLoad(requestID string, p Params, l *load) error {
	if c.cfg.Inline {
		c.wmu.Lock()
		defer c.wmu.Unlock()
	}
	c.qmu.Lock()
	if c.closed {
		c.qmu.Unlock()
		return errClosed
	}
	if _, dup := c.live[requestID]; dup {
		c.qmu.Unlock()
		c.rejects.Inc()
		return invalidf("request %q is already loading", requestID)
	}
	if err := c.guard.check(requestID, l, c.cfg.Clock.Now()); err != nil {
		c.qmu.Unlock()
		c.rejects.Inc()
		return err
	}
	c.guard.start(requestID, l)
	c.live[requestID] = struct{}{}
	c.stats.AddPrefixHits(l.prefixHits) // before the load can end and be drained
	l.start = c.cfg.Clock.Now()
	delete(c.waiting, requestID)
	if !c.cfg.Inline {
		c.queue = append(c.queue, l)
	}
	c.qmu.Unlock()
	if c.cfg.Inline {
		c.rd.route(l)
	}
	// Background: the reader takes the load. Inline: the reader polls the
	// READ just posted, at the fast period from now on.
	c.poll.Wake()
	return nil
}

// KeepAlive tells the rank that request requestID, prefilled as p says,
// waits for decode blocks: it returns at once, the rank handshakes with the
// prefill engine now and keeps prefill's hold alive (heartbeats and hold
// queries) until Load, Abort or Config.KeepAliveTimeout, so the hold does
// not run out while decode is busy. The deadlines the hold queries confirm
// are the ones the later Load trusts.
func (c *Consumer) KeepAlive(requestID string, p Params) error {
	l, err := c.newLoad(requestID, &p, nil)
	if err != nil {
		c.rejects.Inc()
		return err
	}
	p = l.p // its own copy of the block ids
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.closed {
		return errClosed
	}
	if err := c.guard.check(requestID, l, c.cfg.Clock.Now()); err != nil {
		c.rejects.Inc()
		return err
	}
	c.waiting[requestID] = &waiter{p: p, since: c.cfg.Clock.Now()}
	c.poll.Wake()
	return nil
}

// Abort ends request requestID for the engine (its client went away, say).
// A request registered with KeepAlive stops its heartbeats. A loading request
// ends with an error matching connector.ErrAborted: at once when no READ of it is in
// flight, else as soon as the agent has let go of its READs, so that no
// byte lands in its blocks after Drain hands them back. No completion is
// sent: prefill frees the blocks when its hold ends. An unknown or already
// ended id, or a second call, does nothing. It returns an error matching
// connector.ErrClosed after Close.
func (c *Consumer) Abort(requestID string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.qmu.Lock()
	if c.closed {
		c.qmu.Unlock()
		return errClosed
	}
	_, wasWaiting := c.waiting[requestID]
	delete(c.waiting, requestID)
	_, live := c.live[requestID]
	var l *load
	if live {
		for i, q := range c.queue {
			if q.id == requestID {
				l = q
				c.queue = append(c.queue[:i], c.queue[i+1:]...)
				break
			}
		}
	}
	c.qmu.Unlock()
	if !live {
		if wasWaiting {
			c.aborted.Inc()
		}
		return nil
	}
	if l == nil {
		l = c.rd.findLoad(requestID)
	}
	if l == nil || l.ended {
		return nil // draining already: its result comes
	}
	c.aborted.Inc()
	c.rd.fail(l, fmt.Errorf("%w: request %q", errAborted, requestID))
	return nil
}

// Drain returns, without waiting, the requests that ended since the last
// call. In Inline mode it first posts the READs of requests whose handshake
// finished since, on the calling goroutine.
func (c *Consumer) Drain() []connector.Result {
	if c.cfg.Inline {
		c.wmu.Lock()
		posted := c.rd.postReady()
		c.wmu.Unlock()
		if posted {
			c.poll.Wake()
		}
	}
	c.qmu.Lock()
	out := c.results
	c.results = nil
	pending := len(c.live)
	c.qmu.Unlock()
	if pending > 0 {
		// An engine step is the moment to look at READs in flight, as
		// vLLM's get_finished does; without this a finished READ waits
		// for the reader's next timer tick.
		c.poll.Wake()
	}
	return out
}

// Ready is signalled (without blocking the sender) whenever results are
// waiting for Drain, for callers that would rather sleep than poll.
func (c *Consumer) Ready() <-chan struct{} { return c.readyCh }

func (c *Consumer) signal() {
	select {
	case c.readyCh <- struct{}{}:
	default:
	}
}

// Pending returns the number of requests loaded and not yet ended.
func (c *Consumer) Pending() int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return len(c.live)
}

// Stats returns the decode rank's counters and READ times: loads done,
// failed, expired, not held or rejected, hold queries and pins
// (docs/metrics.md lists them).
func (c *Consumer) Stats() connector.Stats { return engine.StatsOf[connector.Stats](c.stats) }

// Close stops the reader and the handshakes, ends every pending request with
// connector.ErrClosed (cancelling its READs) and deregisters the memory. Results stay
// available from Drain. It is idempotent.
func (c *Consumer) Close() error {
	if !engine.Closing(&c.qmu, &c.closed) {
		return nil
	}
	c.cancel()
	c.poll.Stop()
	c.hsWG.Wait()
	c.stopLog()

	c.wmu.Lock()
	c.qmu.Lock()
	queued := c.queue
	c.queue = nil
	clear(c.waiting)
	c.qmu.Unlock()
	for _, l := range queued {
		c.rd.fail(l, errClosed)
	}
	c.rd.close()
	err := engine.Deregister(c.cfg.Agent, c.cfg.Layout, &c.cfg.Staging)
	c.e.core.Release("consumer", c.cfg.Layout.TPRank)
	// What still drains had a READ the agent would not release; with the
	// memory deregistered the agent has nowhere left to write it.
	c.rd.abandon()
	c.wmu.Unlock()
	return err
}

// newLoad checks a request's arguments without touching any state.
func (c *Consumer) newLoad(id string, p *Params, local []int) (*load, error) {
	if id == "" {
		return nil, invalidf("request id is empty")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(p.RemoteRequestID) > notif.MaxIDLen {
		return nil, invalidf("Params.RemoteRequestID is %d bytes, limit %d", len(p.RemoteRequestID), notif.MaxIDLen)
	}
	for i, b := range local {
		if b < 0 || b >= c.cfg.Layout.NumBlocks {
			return nil, invalidf("request %q: localBlocks[%d] is %d, layout has %d blocks", id, i, b, c.cfg.Layout.NumBlocks)
		}
	}
	addr := joinHostPort(p.RemoteHost, p.RemotePort)
	// The reader goroutine uses the block ids long after Load returned, and
	// the engine may reuse its slices by then: keep copies.
	own := *p
	own.RemoteBlockIDs = append([]int(nil), p.RemoteBlockIDs...)
	// The hold key digests every block id: computed once, not at each of
	// the guard, the pin, the completion and the result.
	return &load{id: id, p: own, local: append([]int(nil), local...), key: p.RemoteEngineID + "@" + addr, hold: own.holdKey()}, nil
}

func (c *Consumer) busy() bool {
	c.qmu.Lock()
	n := len(c.queue) + len(c.hsDone)
	c.qmu.Unlock()
	c.wmu.Lock()
	busy := c.rd.busy()
	c.wmu.Unlock()
	return n > 0 || busy
}
