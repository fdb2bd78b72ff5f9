package pushconn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// Consumer is the decode side of the push connector for one TP rank: it
// registers the rank's destination blocks with the prefill engine early
// and reports each request once every prefill rank that writes to it has
// written. Register and Drain never block on I/O; a background goroutine
// handshakes, sends registrations and receives completions.
type Consumer struct {
	engine *pushEngine
	cfg    rankConfig
	// mono reads the rank's monotonic clock (lease.MonoNow), which times
	// the cancel waits.
	mono    func() time.Time
	log     *zap.Logger
	spans   *tracing.Book // the traced requests' kv_wait spans
	stats   *stats.Set
	push    *pushCounters
	poll    *poller.Poller
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopLog func()
	ready   chan struct{}
	// incarnation is this start of the rank, as its handshake payload
	// publishes it; every PUSH_REG carries it (decode_incarnation).
	incarnation uint64

	mu     sync.Mutex
	closed bool
	// seq numbers this rank's registrations (each PUSH_REG's
	// registration_seq). It starts at a random value for every start of the
	// rank, so a restarted instance's registrations never repeat the dead
	// one's (prefill would take them for copies).
	seq     uint64
	tracker *tracker
	inbox   []*decodeReq
	shakes  []shakeResult

	// core is the rank's protocol around the tracker; the poller
	// goroutine feeds it.
	core *decodeCore

	// pool and stage are the staging slots and counters (nil without
	// RankConfig.Staging).
	pool  *staging.Pool
	stage *staging.Counters
	// noStagingParts makes the rank's offers leave out Staging.Parts, as
	// a decode that predates PUSH_STAGED_PART sends them (tests).
	noStagingParts bool
}

// NewConsumer starts a decode rank: it registers the layout's memory with
// the agent, publishes the rank on the engine's side channel and starts the
// background goroutine.
func NewConsumer(pub *connector.Engine, config Config) (*Consumer, error) {
	e, err := engineOf(pub)
	if err != nil {
		return nil, err
	}
	cfg, err := newRankConfig(e, config, false)
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		engine:  e,
		cfg:     cfg,
		mono:    lease.MonoNow(cfg.Clock),
		log:     cfg.Log(e.ID(), "decode"),
		stats:   stats.New(),
		spans:   tracing.New(cfg.TracerProvider),
		tracker: newTracker(cfg.RegistrationTimeout, cfg.CancelTimeout),
		ready:   make(chan struct{}, 1),
	}
	c.tracker.recompute = cfg.FailurePolicy == connector.PolicyRecompute
	c.tracker.noCancel, c.tracker.siblings = e.vllm(), e.vllm()
	c.stats.SetGroups(cfg.Layout.GroupKinds())
	c.push = newPushCounters(c.stats)
	if cfg.Staging.Enabled() {
		c.pool = staging.NewPool(cfg.Staging.Base, cfg.Staging.SlotBytes, cfg.Staging.Slots)
		c.stage = staging.NewCounters(c.stats)
		c.tracker.onPublish = c.releaseStage
	}
	inc, err := e.core.PublishStaged(cfg.Agent, cfg.Layout, &cfg.Staging)
	if err != nil {
		return nil, err
	}
	c.incarnation = inc
	if e.vllm() {
		c.incarnation = 0 // decode_incarnation is gonixl's own key
	}
	c.seq = rand.Uint64() >> 1 // far from wrapping to 0, which means "no seq"
	c.core = &decodeCore{
		cfg: decodeConfig{engineID: e.ID(), host: e.Host(), port: e.Port(), layout: &c.cfg.Layout, vllm: e.vllm(), incarnation: c.incarnation,
			registrationTimeout: cfg.RegistrationTimeout, cancelTimeout: cfg.CancelTimeout, engineTTL: cfg.EngineTTL},
		edge: (*consumerEdge)(c), log: c.log, stats: c.stats, push: c.push, stage: c.stage, tracker: c.tracker, peers: map[string]*decodePeer{}, spans: c.spans,
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.poll = cfg.Poller("pushconn", c.log, c.busy, c.tick)
	c.poll.Handle(pushwire.FailPrefix, c.core.onFailure)
	c.poll.Handle(pushwire.RegPrefix, c.onStray)
	c.poll.Handle(pushwire.CancelPrefix, c.onStray)
	c.poll.Handle(pushwire.CancelAckPrefix, c.core.onCancelAck)
	c.poll.Handle(pushwire.StagedPrefix, c.onStaged)
	c.poll.Handle(pushwire.StagedChunkPrefix, c.onStagedChunk)
	c.poll.Handle(pushwire.StagedPartPrefix, c.onStagedPart)
	if e.vllm() {
		// None of gonixl's messages is part of vLLM's protocol: a peer
		// that speaks it never sends them, so one that arrives changes
		// nothing (the registration timeout is the only failure signal).
		for _, prefix := range gonixlOnlyToDecode {
			c.poll.Handle(prefix, c.onStray)
		}
	}
	c.poll.Handle(notif.HeartbeatPrefix, c.onStray)
	c.poll.Handle("", c.core.onCompletion)
	c.stopLog = engine.StartStatsLog(cfg.Logger, cfg.StatsInterval, c.stats, e.ID(), cfg.Layout.TPRank, "decode")
	c.poll.Start()
	return c, nil
}

// Register starts request requestID: once the engine knows the prefill
// engine (one handshake per engine, in the background), it sends a PUSH_REG
// registration of blockIDs (the rank's blocks for the request, in token
// order; the connector supports one KV-cache group, which PUSH_REG sends as
// a list of one list) to every prefill rank that writes into this rank. It
// returns at once; the request's connector.Result comes from Drain. An error means
// nothing was registered.
func (c *Consumer) Register(requestID string, prefill Prefill, blockIDs []int, opts ...requestOption) error {
	o := c.engine.vllmOpts(applyOpts(opts))
	if err := prefill.validate(); err != nil {
		return err
	}
	if requestID == "" || len(requestID) > notif.MaxIDLen {
		return invalidf("request id must be 1..%d bytes, got %d", notif.MaxIDLen, len(requestID))
	}
	if len(c.cfg.Layout.Groups) > 0 {
		return invalidf("request %q: the layout has %d KV-cache groups: use RegisterGroups", requestID, len(c.cfg.Layout.Groups))
	}
	for i, id := range blockIDs {
		if id < 0 || id >= c.cfg.Layout.NumBlocks {
			return invalidf("request %q block %d is %d, outside 0..%d", requestID, i, id, c.cfg.Layout.NumBlocks-1)
		}
	}
	// The background goroutine encodes the block ids after Register
	// returned, when the engine may have reused its slices: keep copies.
	// PUSH_REG carries one list per KV-cache group: one list here.
	return c.register(requestID, prefill, [][]int{append([]int{}, blockIDs...)}, o)
}

// register starts a checked request: blocks are its lists, one per
// KV-cache group, the connector's own copies.
func (c *Consumer) register(requestID string, prefill Prefill, blocks [][]int, o requestOpts) error {
	r := &decodeReq{id: requestID, transferID: o.transferID, prefill: prefill, blocks: blocks}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	err := c.tracker.add(c.now(), r)
	if err == nil {
		// Counted before the request can end and be drained.
		c.stats.AddPrefixHits(o.prefixHits)
		if !o.noSeq && !c.engine.vllm() { // registration_seq is gonixl's own key
			c.seq++
			r.seq = c.seq
		}
		c.inbox = append(c.inbox, r)
	}
	c.mu.Unlock()
	if err == nil {
		c.poll.Wake()
	}
	return err
}

// Drain returns the requests that ended since the last call, each exactly
// once. It never blocks. Like an engine step in vLLM, it also wakes the
// background goroutine to fetch notifications now, so completions that
// arrived since are seen at the engine's pace, not only at the poll period.
func (c *Consumer) Drain() []connector.Result {
	c.mu.Lock()
	out := c.tracker.drain()
	pending := c.tracker.pending()
	c.mu.Unlock()
	if pending > 0 {
		c.poll.Wake()
	}
	return out
}

// Abort ends request requestID at once, as the engine drops it (its client
// went away): no completion counts for it any more, the prefill ranks that
// got its registration are sent PUSH_CANCEL, and its connector.Result, with an error
// matching connector.ErrAborted, comes out of Drain once no prefill rank can still
// write into its blocks (every one has written, failed or acknowledged the
// cancel, or CancelTimeout passed). In vLLM's protocol there is no cancel
// to send: the Result waits until every prefill rank that got the
// registration has written, or until RegistrationTimeout after the
// registration plus CancelTimeout (the package documentation, "vLLM's
// protocol"). Aborting a request that already ended,
// or an id never registered, does nothing; after Close it returns an
// error matching connector.ErrClosed.
func (c *Consumer) Abort(requestID string) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	ended := c.tracker.fail(c.now(), requestID,
		fmt.Errorf("%w: request %q was aborted by the engine", errAborted, requestID))
	c.mu.Unlock()
	if ended {
		c.push.aborted.Inc()
		c.poll.Wake() // the poller sends the cancels and publishes
	}
	return nil
}

// Ready is signalled (without blocking the sender) whenever results are
// waiting for Drain, for callers that would rather sleep than poll.
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// Pending returns how many requests wait for their result (including
// ended ones whose blocks some prefill rank may still write into).
func (c *Consumer) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tracker.pending()
}

// Stats returns the decode rank's counters: registrations sent,
// completions counted or stale, PUSH_FAIL received, cancels sent and
// acknowledged, timeouts (the package documentation, Metrics).
func (c *Consumer) Stats() connector.Stats { return engine.StatsOf[connector.Stats](c.stats) }

// Close stops the background goroutine, ends every pending request with
// connector.ErrClosed (Drain still returns them), withdraws the rank from the side
// channel and deregisters the layout's memory. It is idempotent.
func (c *Consumer) Close() error {
	if !engine.Closing(&c.mu, &c.closed) {
		return nil
	}
	c.cancel()
	c.poll.Stop()
	c.wg.Wait()
	c.stopLog()
	c.mu.Lock()
	now := c.now()
	for id := range c.tracker.reqs {
		c.tracker.fail(now, id, fmt.Errorf("%w: consumer closed while request %q waited for its push", errClosed, id))
	}
	c.inbox = nil
	cancels := c.tracker.takeCancels()
	c.mu.Unlock()
	c.core.sendCancels(cancels) // the poller has stopped: this goroutine owns the agent's sends now
	c.engine.core.Withdraw(c.cfg.Layout.TPRank)
	err := engine.Deregister(c.cfg.Agent, c.cfg.Layout, &c.cfg.Staging)
	// With the memory deregistered no WRITE can land in it any more: the
	// blocks of every request still draining go back to the engine now.
	c.mu.Lock()
	c.tracker.releaseAll(c.now())
	c.mu.Unlock()
	c.signal()
	if err != nil && !errors.Is(err, nixl.ErrClosed) {
		return fmt.Errorf("pushconn: deregister KV memory: %w", err)
	}
	return nil
}

// now reads the rank's clocks for the tracker.
func (c *Consumer) now() instant { return instant{wall: c.cfg.Clock.Now(), mono: c.mono()} }

func (c *Consumer) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// busy keeps the poller at its fast period while requests wait for
// completions.
func (c *Consumer) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tracker.pending() > 0
}

// tick runs on the poller goroutine after each round of notifications.
func (c *Consumer) tick() {
	c.mu.Lock()
	inbox, shakes := c.inbox, c.shakes
	c.inbox, c.shakes = nil, nil
	c.mu.Unlock()
	c.core.tick(shakes, inbox)
}

// onStray counts notifications that a decode rank never expects.
func (c *Consumer) onStray(sender string, msg []byte) {
	c.stats.UnknownNotifications.Inc()
	c.log.Debug("pushconn: dropped a notification decode does not expect", zap.String("sender", sender), zap.Int("bytes", len(msg)))
}

// consumerEdge is the Consumer as its decode core's edge (decodeEdge): its
// mutex, its agent, its handshake client and goroutines, its staging
// slots.
type consumerEdge Consumer

func (e *consumerEdge) consumer() *Consumer { return (*Consumer)(e) }

func (e *consumerEdge) lock()   { e.mu.Lock() }
func (e *consumerEdge) unlock() { e.mu.Unlock() }

func (e *consumerEdge) notify(to string, msg []byte) error { return e.cfg.Agent.GenNotif(to, msg, nil) }

// handshake fetches prefill engine pf's payload in the background; the
// result reaches the core at the next tick.
func (e *consumerEdge) handshake(key string, pf Prefill) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		payload, err := e.engine.core.Client().Get(e.ctx, pf.EngineID, e.engine.addr(pf.Host, pf.Port), pf.TPSize)
		e.mu.Lock()
		e.shakes = append(e.shakes, shakeResult{key: key, payload: payload, err: err})
		e.mu.Unlock()
		e.poll.Wake()
	}()
}

func (e *consumerEdge) forgetHandshake(pf Prefill) {
	e.engine.core.Client().Forget(pf.EngineID, e.engine.addr(pf.Host, pf.Port))
}

func (e *consumerEdge) loadMD(agent string, md []byte) (string, error) {
	return loadPeerMD(e.cfg.Agent, agent, md)
}

func (e *consumerEdge) unloadMD(agent string) error { return e.cfg.Agent.InvalidateRemoteMD(agent) }

func (e *consumerEdge) closing() bool { return e.ctx.Err() != nil }

func (e *consumerEdge) signal() { e.consumer().signal() }

func (e *consumerEdge) now() instant { return e.consumer().now() }

func (e *consumerEdge) stagingOffer(p *decodePeer, r *decodeReq) *pushwire.Staging {
	return e.consumer().offerStaging(p, r)
}
