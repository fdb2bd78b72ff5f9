package pullconn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/lease"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/poller"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
)

// Consumer is one decode TP rank: it loads requests' blocks from prefill
// engines. Load and Drain never wait for the network; a reader goroutine
// (the poller) handshakes, posts READs (unless Inline), polls them and sends
// heartbeats. All methods are safe for concurrent use.
type Consumer struct {
	e   *pullEngine
	cfg rankConfig
	// mono reads the rank's monotonic clock (lease.MonoNow), which times
	// how long an ended load whose READ the agent would not let go of
	// keeps its blocks.
	mono    func() time.Time
	stats   *stats.Set
	rejects *stats.Counter
	log     *zap.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	hsWG    sync.WaitGroup // handshake goroutines
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
	// read are the remote requests (key + "\x00" + remote id) this rank
	// read and sent its completion for, until their hold's deadline: prefill
	// may free them any time after the completion, so loading one again
	// would read freed blocks.
	read map[string]time.Time
	// loading are the remote requests (same key) of this rank's live loads:
	// two loads of one remote request would each send a completion, and the
	// first may let prefill free the blocks the second still reads.
	loading map[string]string

	// Work state: the reader's, and the caller's too in Inline mode.
	wmu     sync.Mutex
	remotes map[string]*remote
	reading []*load
	ready   []*load // handshake done, to post on the next Drain (Inline)
	// unblocked are loads whose awaited chunks became ready, to post on
	// the next Drain (Inline).
	unblocked []*load
	// awaitingPin are loads whose READs ended and whose pin prefill has
	// not answered yet.
	awaitingPin map[*load]struct{}
	toPin       []*load // loads whose pin the next confirmation asks for
	lastHB      time.Time
	scratch     descriptors.Transfer // mapping lists, reused by post
	// draining are loads that ended but whose READs the agent has not yet
	// let go of: their result waits until no byte can land in their blocks.
	draining []*load
	// confirmed holds, per prefill engine (remote key) and remote request
	// id, the latest deadline a hold query returned, on this rank's clock.
	confirmed map[string]time.Time

	aborted       *stats.Counter
	waitTimeouts  *stats.Counter
	readForgotten *stats.Counter
	forgotten     *stats.Counter
	restarts      *stats.Counter
	regenerations *stats.Counter
	stuck         *stats.Counter
	holdQueries   *stats.Counter
	failedQueries *stats.Counter
	notHeld       *stats.Counter
	confirmations *stats.Counter
	confirmMicros *stats.Counter

	// Staging (pool nil without RankConfig.Staging): this rank's slots,
	// counters, cost model, and the plans' scratch (wmu).
	pool    *staging.Pool
	stage   *staging.Counters
	model   staging.Model
	planner staging.Planner
	// readiness counts the readiness queries of awaited slots.
	readiness readyCounters
}

// waiter is a request registered with KeepAlive.
type waiter struct {
	p     Params
	since time.Time
}

// load is one request on its way through a decode rank.
type load struct {
	id    string
	p     Params
	hold  uint64 // p.holdKey()
	local []int
	// groups are the decode lists of a grouped load (LoadGroups), one
	// per KV-cache group; local then holds them flattened, for the
	// recompute policy's invalid blocks and the "nothing to read" check.
	groups   [][]int
	key      string
	r        *remote
	deadline time.Time
	xfers    []*xfer
	after    []int // prefill ranks to notify with GenNotif once done
	start    time.Time
	// completed: its completions went out (READ notifications or
	// GenNotif), so prefill may free the blocks; until readUntil, its
	// hold's deadline, the remote request must not be loaded again.
	completed bool
	readUntil time.Time
	ended     bool
	// slot is the staging slot its staged READs land in, released with
	// its result; slotUsed is how much of it they take.
	slot     *staging.Slot
	slotUsed uint64
	// await, when its Params say RemoteStagingAwait, is its wait for
	// prefill's background gathers (ready.go).
	await *await
	// postErr is a READ of the slot that could not be posted during a
	// scatter: the load fails on its next poll.
	postErr error
	// result is the end of a load that waits in draining for its READs to
	// let go; it is published after.
	result     connector.Result
	drainUntil time.Time // on the rank's monotonic clock (Consumer.mono)
	// pin is where the load's pin stands, pinSent when it was asked (this
	// process's monotonic clock) and readsEnded when its READs were seen
	// ended; zero until then. Only with a prefill that pins.
	pin        pinState
	pinSent    time.Time
	readsEnded time.Time

	// prefixHits are a grouped load's prefix-hit blocks per group
	// (descriptors.PrefixHits), counted once startLoad takes the load.
	prefixHits []int

	// After a restart of the prefill engine (restart.go): rehandshook, the
	// load was routed to a new handshake once (no second time); retried,
	// its READ failed on a gone agent and it was routed again, to be posted
	// only if the new handshake (retryFrom is the old one) shows another
	// incarnation, failing with retryErr otherwise.
	rehandshook, retried bool
	retryFrom            *pairing
	retryErr             error
}

type xfer struct {
	// scatter, for a staged READ, copies the slot into the blocks once
	// the READ is done.
	scatter       []staging.Seg
	scatterBlocks *staging.BlockCopy
	h             nixl.XferHandle
	rank          int
	start         time.Time
	bytes         uint64
	descs         int
	done          bool
	// part: one chunk of a rank's staged READ cut into several, but not
	// its last; the last carries the rank's bytes and descriptors, so that
	// the rank's READ counts once. scattered: its scatter ran (a chunk is
	// scattered as soon as it is read).
	part, scattered bool
	// pending: a READ of prefill's slot not posted yet, waiting for its
	// rank to have gathered need regions; local and remote are its lists
	// until then.
	pending       bool
	need          int
	local, remote nixl.XferList
}

type handshakeDone struct {
	r   *remote
	set *pairing
	err error
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
	c := &Consumer{e: e, cfg: cfg, mono: lease.MonoNow(cfg.Clock), stats: stats.New(),
		log:         cfg.Log(e.ID(), "decode"),
		live:        map[string]struct{}{},
		waiting:     map[string]*waiter{},
		remotes:     map[string]*remote{},
		awaitingPin: map[*load]struct{}{},
		confirmed:   map[string]time.Time{},
		readyCh:     make(chan struct{}, 1),
		read:        map[string]time.Time{},
		loading:     map[string]string{},
	}
	c.stats.SetGroups(cfg.Layout.GroupKinds())
	c.rejects = c.stats.Counter("rejected_loads", "Load or KeepAlive calls refused for invalid arguments.")
	c.aborted = c.stats.Counter("aborted_requests", "Requests the engine aborted (Abort).")
	c.readForgotten = c.stats.Counter("read_guards_forgotten", "Read remote requests forgotten over the bound before their deadline (a re-load of one is no longer refused).")
	c.waitTimeouts = c.stats.Counter("keepalive_timeouts", "KeepAlive registrations dropped: Config.KeepAliveTimeout passed without a Load, or the prefill engine's handshake failed.")
	c.regenerations = c.stats.Counter("registration_rehandshakes", "Handshakes with a prefill engine forgotten because a request named a higher registration generation (vLLM's remote_registration_generation: prefill registered its KV cache anew).")
	c.forgotten = c.stats.Counter("forgotten_engines", "Prefill engines forgotten after RankConfig.EngineTTL without a request (their metadata unloaded; the next request handshakes again).")
	c.restarts = c.stats.Counter("restart_rehandshakes", "Handshakes with a prefill engine made again for a load because the engine restarted at its address (its Params name another incarnation than the handshake, or a READ found its agent gone and the load is retried once).")
	c.stuck = c.stats.Counter("stuck_transfers", "Ended loads whose READ the agent would not release within the transfer timeout.")
	c.holdQueries = c.stats.Counter("hold_queries", "Hold queries answered by prefill engines (their holds extended, their deadlines told).")
	c.notHeld = c.stats.Counter("not_held", "Loads failed with ErrNotHeld: prefill did not pin the hold the Params name for this engine, or the READs outlasted the pin.")
	c.confirmations = c.stats.Counter("confirmations", "Pin exchanges with prefill engines, one per engine and reader round for the loads whose READs were posted.")
	c.confirmMicros = c.stats.Counter("confirmation_microseconds", "Time spent waiting for confirmations, in microseconds (divide by confirmations for the mean round trip).")
	c.failedQueries = c.stats.Counter("failed_hold_queries", "Hold queries that failed; the loads keep the deadlines they had.")
	if cfg.Staging.Enabled() {
		c.pool = staging.NewPool(cfg.Staging.Base, cfg.Staging.SlotBytes, cfg.Staging.Slots)
		c.stage, c.model = staging.NewCounters(c.stats), staging.NewModel(&cfg.Staging)
		c.readiness = newReadyCounters(c.stats)
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
	if err := c.checkRemote(requestID, l); err != nil {
		c.qmu.Unlock()
		c.rejects.Inc()
		return err
	}
	c.loading[l.key+"\x00"+p.RemoteRequestID] = requestID
	c.live[requestID] = struct{}{}
	c.stats.AddPrefixHits(l.prefixHits) // before the load can end and be drained
	l.start = c.cfg.Clock.Now()
	delete(c.waiting, requestID)
	if !c.cfg.Inline {
		c.queue = append(c.queue, l)
	}
	c.qmu.Unlock()
	if c.cfg.Inline {
		c.route(l)
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
	if err := c.checkRemote(requestID, l); err != nil {
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
		l = c.findLoad(requestID)
	}
	if l == nil || l.ended {
		return nil // draining already: its result comes
	}
	c.aborted.Inc()
	c.fail(l, fmt.Errorf("%w: request %q", errAborted, requestID))
	return nil
}

// findLoad looks for a routed load that has not ended. wmu is held.
func (c *Consumer) findLoad(id string) *load {
	for _, set := range [][]*load{c.reading, c.ready} {
		for _, l := range set {
			if l.id == id && !l.ended {
				return l
			}
		}
	}
	for l := range c.awaitingPin {
		if l.id == id && !l.ended {
			return l
		}
	}
	for _, r := range c.remotes {
		for _, l := range r.parked {
			if l.id == id && !l.ended {
				return l
			}
		}
	}
	return nil
}

// Drain returns, without waiting, the requests that ended since the last
// call. In Inline mode it first posts the READs of requests whose handshake
// finished since, on the calling goroutine.
func (c *Consumer) Drain() []connector.Result {
	if c.cfg.Inline {
		c.wmu.Lock()
		ready, unblocked := c.ready, c.unblocked
		c.ready, c.unblocked = nil, nil
		for _, l := range ready {
			c.post(l)
		}
		for _, l := range unblocked {
			if err := c.postReady(l); err != nil {
				c.fail(l, err)
			}
		}
		c.wmu.Unlock()
		if len(ready)+len(unblocked) > 0 {
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

// maxRead is how many read remote requests a rank remembers before it drops
// those whose deadline passed.
const maxRead = 1 << 16

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
		c.fail(l, errClosed)
	}
	for _, l := range c.reading {
		c.fail(l, errClosed)
	}
	c.reading = nil
	for l := range c.awaitingPin {
		c.fail(l, errClosed)
	}
	clear(c.awaitingPin)
	for _, l := range c.ready {
		c.fail(l, errClosed)
	}
	c.ready = nil
	for _, r := range c.remotes {
		for _, l := range r.parked {
			c.fail(l, errClosed)
		}
		r.parked = nil
	}
	c.drain(c.mono())
	err := engine.Deregister(c.cfg.Agent, c.cfg.Layout, &c.cfg.Staging)
	c.e.core.Release("consumer", c.cfg.Layout.TPRank)
	// What still drains had a READ the agent would not release; with the
	// memory deregistered the agent has nowhere left to write it.
	for _, l := range c.draining {
		c.stuck.Inc()
		c.publish(l)
	}
	c.draining = nil
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
	n += len(c.reading) + len(c.draining) + len(c.awaitingPin)
	c.wmu.Unlock()
	return n > 0
}

// end ends a request exactly once: its result is published as soon as
// none of its READs can still write into its blocks. wmu is held.
func (c *Consumer) end(l *load, res connector.Result) {
	if l.ended {
		return
	}
	l.ended = true
	l.result = res
	if c.releaseXfers(l) {
		c.publish(l)
		return
	}
	l.drainUntil = c.mono().Add(c.cfg.TransferTimeout)
	c.draining = append(c.draining, l)
}

// publish hands an ended load's result to Drain. wmu is held.
func (c *Consumer) publish(l *load) {
	if l.slot != nil {
		// No READ of the load can land any more: the slot is free.
		if err := c.pool.Release(*l.slot); err != nil {
			c.log.Error("pullconn: staging slot released twice", zap.String("request_id", l.id), zap.Error(err))
		}
		l.slot = nil
	}
	now := c.cfg.Clock.Now()
	l.result.Start, l.result.End = l.start, now
	if hold, guarded := c.holdDeadline(l); guarded && l.completed {
		// Hold queries may have moved the deadline since the completion.
		l.readUntil = maxTime(l.readUntil, hold.Add(c.cfg.ExpiryMargin))
	}
	c.qmu.Lock()
	if c.loading[l.key+"\x00"+l.p.RemoteRequestID] == l.id {
		delete(c.loading, l.key+"\x00"+l.p.RemoteRequestID)
	}
	if l.completed {
		// Bounded: no hold lasts longer than a keep-alive plus a transfer.
		l.readUntil = minTime(l.readUntil, now.Add(c.cfg.KeepAliveTimeout+c.cfg.TransferTimeout))
		if len(c.read) >= maxRead {
			for k, until := range c.read {
				if !now.Before(until) {
					delete(c.read, k)
				}
			}
			for k := range c.read {
				if len(c.read) < maxRead {
					break
				}
				// Over the bound with live entries: forget some (a later
				// load of one would lose this guard; counted).
				delete(c.read, k)
				c.readForgotten.Inc()
			}
		}
		c.read[l.readKey()] = l.readUntil
	}
	delete(c.live, l.id)
	c.results = append(c.results, l.result)
	c.qmu.Unlock()
	c.signal()
	delete(c.confirmed, l.key+"\x00"+l.p.RemoteRequestID)
}

func (c *Consumer) fail(l *load, err error) {
	res := connector.Result{RequestID: l.id, Err: err}
	if c.cfg.FailurePolicy == connector.PolicyRecompute && len(l.local) > 0 {
		res.InvalidBlocks = append([]int(nil), l.local...)
	}
	c.end(l, res)
}

// releaseXfers releases the load's transfer requests and reports whether
// the agent let go of all of them. A request it refuses to release (a READ
// it cannot cancel yet) stays, and drain tries again: until the agent lets
// go, the READ may still write into the load's blocks.
func (c *Consumer) releaseXfers(l *load) bool {
	var live []*xfer
	var hs []nixl.XferHandle
	for _, x := range l.xfers {
		if x.h != 0 {
			live, hs = append(live, x), append(hs, x.h)
		}
	}
	if len(hs) == 0 {
		return true
	}
	errs := make([]error, len(hs))
	if err := nixl.ReleaseXferReqs(c.cfg.Agent, hs, errs); err != nil {
		c.log.Debug("pullconn: transfers not released yet", zap.String("request_id", l.id), zap.Error(err))
		return false
	}
	all := true
	for i, x := range live {
		err := errs[i]
		if err != nil && !errors.Is(err, nixl.ErrInvalidParam) && !errors.Is(err, nixl.ErrNotFound) {
			c.log.Debug("pullconn: transfer not released yet", zap.String("request_id", l.id), zap.Error(err))
			all = false
			continue
		}
		x.h = 0
	}
	return all
}

// drain publishes the ended loads whose READs the agent has let go of, and
// those past their drain deadline at mono (the rank's monotonic clock: no
// step of the configured clock hands blocks back early), counted as stuck.
// wmu is held.
func (c *Consumer) drain(mono time.Time) {
	keep := c.draining[:0]
	for _, l := range c.draining {
		switch {
		case c.releaseXfers(l):
			c.publish(l)
		case !mono.Before(l.drainUntil):
			c.stuck.Inc()
			c.log.Error("pullconn: READ not released within the transfer timeout; handing its blocks back anyway", zap.String("request_id", l.id))
			c.publish(l)
		default:
			keep = append(keep, l)
		}
	}
	clear(c.draining[len(keep):])
	c.draining = keep
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// checkRemote refuses to start a load or keep-alive of a remote request this
// rank is loading already or has read. qmu is held.
func (c *Consumer) checkRemote(id string, l *load) error {
	p := &l.p
	k := l.key + "\x00" + p.RemoteRequestID
	if other, ok := c.loading[k]; ok {
		return invalidf("request %q: remote request %q of engine %q is already loading on this rank (as request %q)", id, p.RemoteRequestID, p.RemoteEngineID, other)
	}
	if until, ok := c.read[l.readKey()]; ok && c.cfg.Clock.Now().Before(until) {
		return invalidf("request %q: remote request %q of engine %q was already read by this rank, and prefill may have freed its blocks since", id, p.RemoteRequestID, p.RemoteEngineID)
	}
	return nil
}

// readKey names the load's hold in Consumer.read: a later hold of the same
// id (another nonce and deadline, so another hold key) is other blocks
// held afresh, which this rank may read.
func (l *load) readKey() string {
	return l.key + "\x00" + l.p.RemoteRequestID + "\x00" + strconv.FormatUint(l.hold, 16)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
