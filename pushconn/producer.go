package pushconn

import (
	"context"
	"errors"
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
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// Producer is the prefill side of the push connector for one TP rank with
// its own agent. RequestFinished hands it a request's blocks; its writer
// goroutine pairs them with decode's registration (whichever comes second
// triggers the WRITE), handshakes with the decode engine when needed
// without holding up other requests, WRITEs the blocks with a completion
// notification, reports any failure to decode with PUSH_FAIL, and hands
// the blocks back through DrainFreed exactly once: after the WRITEs ended,
// or when their lease expired with no registration.
type Producer struct {
	engine *pushEngine
	cfg    rankConfig
	// mono reads the rank's monotonic clock (lease.MonoNow), which times
	// its WRITEs: how long one may move, and how long a failed one the
	// agent would not let go of keeps its blocks.
	mono  func() time.Time
	log   *zap.Logger
	stats *stats.Set
	push  *pushCounters
	// spans: the traced requests' hold spans, their WRITEs' children;
	// times: where the WRITEs' times come from.
	spans   *tracing.Book
	times   *xfertime.Source
	poll    *poller.Poller
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopLog func()
	world   int

	// postMu is held by the writer while it posts a WRITE and by Abort to
	// wait for such a post: once Abort returned, no WRITE of the request
	// starts.
	postMu sync.Mutex

	mu        sync.Mutex
	closed    bool
	held      map[string]bool // request ids given and not yet freed
	aborting  map[string]bool // held ids the engine aborted
	aborts    []string        // aborted ids for the writer
	finished  []*hold
	progress  map[string]progressState // requests reporting progress, not finished
	progressQ []progressEvent          // progress reports for the writer
	shakes    []shakeResult
	freed     []string
	closing   bool     // Close is releasing everything
	lastFreed []string // freed by Close, published after DeregisterMem

	w writer // the writer core and its shell: poller goroutine only

	// pool, stage and model are the staging slots, counters and cost model
	// (pool and stage nil without RankConfig.Staging).
	pool  *staging.Pool
	stage *staging.Counters
	model staging.Model
}

// NewProducer starts a prefill rank: it registers the layout's memory with
// the agent, publishes the rank on the engine's side channel and starts the
// writer goroutine.
func NewProducer(pub *connector.Engine, config Config) (*Producer, error) {
	e, err := engineOf(pub)
	if err != nil {
		return nil, err
	}
	cfg, err := newRankConfig(e, config, true)
	if err != nil {
		return nil, err
	}
	p := &Producer{
		engine:   e,
		cfg:      cfg,
		mono:     lease.MonoNow(cfg.Clock),
		log:      cfg.Log(e.ID(), "prefill"),
		stats:    stats.New(),
		spans:    tracing.New(cfg.TracerProvider),
		held:     map[string]bool{},
		aborting: map[string]bool{},
		progress: map[string]progressState{},
		world:    e.TPSize(), // vLLM's "world size" in the completion is the TP group's, with or without PP
	}
	p.push = newPushCounters(p.stats)
	p.times = xfertime.New(cfg.Agent, p.stats)
	if err := newWriter(p); err != nil {
		return nil, err
	}
	if cfg.Staging.Enabled() {
		p.pool = staging.NewPool(cfg.Staging.Base, cfg.Staging.SlotBytes, cfg.Staging.Slots)
		p.stage = staging.NewCounters(p.stats)
		p.model = staging.NewModel(&cfg.Staging)
	}
	if _, err := e.core.PublishStaged(cfg.Agent, cfg.Layout, &cfg.Staging); err != nil {
		return nil, err
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.poll = cfg.Poller("pushconn", p.log, p.w.busy, p.w.tick)
	p.poll.Handle(pushwire.RegPrefix, p.w.core.onRegistration)
	p.poll.Handle(pushwire.CancelPrefix, cancels{p.w.core}.onCancel)
	p.poll.Handle(pushwire.FailPrefix, p.w.onStray)
	p.poll.Handle(pushwire.CancelAckPrefix, p.w.onStray)
	p.poll.Handle(notif.HeartbeatPrefix, p.w.onStray)
	if e.vllm() {
		// vLLM's decode keeps finished blocks alive with heartbeats and
		// never cancels (its protocol has no PUSH_CANCEL).
		p.poll.Handle(notif.HeartbeatPrefix, p.w.core.onHeartbeat)
		p.poll.Handle(pushwire.CancelPrefix, p.w.onStray)
	}
	p.poll.Handle("", p.w.onStray)
	p.stopLog = engine.StartStatsLog(cfg.Logger, cfg.StatsInterval, p.stats, e.ID(), cfg.Layout.WorldRank(), "prefill")
	p.poll.Start()
	return p, nil
}

// RequestFinished hands over a finished request's blocks (this rank's
// block ids, in token order) and returns its transfer params. The blocks
// stay held until DrainFreed returns requestID. It never blocks: the
// writer goroutine does the rest. An error means nothing was taken.
func (p *Producer) RequestFinished(requestID string, blockIDs []int, opts ...requestOption) (Params, error) {
	o := p.engine.vllmOpts(applyOpts(opts))
	if requestID == "" || len(requestID) > notif.MaxIDLen {
		return Params{}, invalidf("request id must be 1..%d bytes, got %d", notif.MaxIDLen, len(requestID))
	}
	if len(blockIDs) == 0 {
		return Params{}, invalidf("request %q has no blocks", requestID)
	}
	if len(p.cfg.Layout.Groups) > 0 {
		return Params{}, invalidf("request %q: the layout has %d KV-cache groups: use RequestFinishedGroups", requestID, len(p.cfg.Layout.Groups))
	}
	for i, id := range blockIDs {
		if id < 0 || id >= p.cfg.Layout.NumBlocks {
			return Params{}, invalidf("request %q block %d is %d, outside 0..%d", requestID, i, id, p.cfg.Layout.NumBlocks-1)
		}
	}
	if o.tokens < 0 || o.tokens > len(blockIDs)*p.cfg.Layout.BlockSize {
		return Params{}, invalidf("request %q has %d tokens, its %d blocks hold at most %d", requestID, o.tokens, len(blockIDs), len(blockIDs)*p.cfg.Layout.BlockSize)
	}
	// The writer goroutine reads the block ids after this call returned,
	// when the engine may have reused its slice: the hold keeps a copy.
	h := &hold{id: requestID, transferID: o.transferID, blocks: append([]int(nil), blockIDs...), tokens: o.tokens, finished: p.now()}
	return p.hold(h, engine.Public.Params(p.engine.core, requestID, blockIDs).(connector.TransferParams))
}

// hold takes a checked request h and returns its Params, built on tp.
func (p *Producer) hold(h *hold, tp connector.TransferParams) (Params, error) {
	requestID := h.id
	// A closed Engine serves no side channel: no decode engine could
	// handshake with the rank to be written, so the request is not taken.
	if err := p.engine.core.CheckOpen(); err != nil {
		return Params{}, err
	}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return Params{}, errClosed
	case p.held[requestID]:
		if ok, err := p.finishing(h); !ok || err != nil {
			p.mu.Unlock()
			if err != nil {
				return Params{}, err
			}
			return Params{}, invalidf("request %q is already finished and held", requestID)
		}
	}
	p.held[requestID] = true
	p.finished = append(p.finished, h)
	p.mu.Unlock()
	p.poll.Wake()
	return Params{
		TransferParams: tp,
		PPSize:         p.engine.PPSize(),
		NumTokens:      h.tokens,
		TransferMode:   modePush,
		TransferID:     h.transferID,
	}, nil
}

// DrainFreed returns the ids of requests whose blocks the engine may free
// now, each exactly once. It never blocks; it counts as an engine step and
// wakes the writer.
func (p *Producer) DrainFreed() []string {
	p.mu.Lock()
	out := p.freed
	p.freed = nil
	p.mu.Unlock()
	p.poll.Wake()
	return out
}

// Abort withdraws the rank's hold on a finished request that the engine
// dropped: no WRITE of it starts once Abort returned, registrations
// matched to it whose WRITE has not started get PUSH_FAIL "aborted", and a
// registration that arrives for it later gets PUSH_FAIL "expired" at once.
// A WRITE already in flight is left to end; the blocks come out of
// DrainFreed, exactly once, when none is in flight. Aborting an id that is
// not held (never given, already freed or already aborted) does nothing;
// after Close it returns an error matching connector.ErrClosed.
func (p *Producer) Abort(requestID string) error {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return errClosed
	case !p.held[requestID] || p.aborting[requestID]:
		p.mu.Unlock()
		return nil
	}
	p.aborting[requestID] = true
	p.aborts = append(p.aborts, requestID)
	p.mu.Unlock()
	// A WRITE being posted now has checked the flag before it was set:
	// wait for it, so that none starts after this returns.
	p.postMu.Lock()
	//lint:ignore SA2001 an empty critical section is the barrier: it waits for the post in progress
	p.postMu.Unlock()
	p.push.aborted.Inc()
	p.poll.Wake()
	return nil
}

// isAborted reports whether the engine aborted held request id.
func (p *Producer) isAborted(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.aborting[id]
}

// Stats returns the prefill rank's counters and WRITE times: matches,
// duplicates, PUSH_FAIL sent, cancels answered, limits hit (the package
// documentation, Metrics).
func (p *Producer) Stats() connector.Stats { return engine.StatsOf[connector.Stats](p.stats) }

// Held returns how many finished requests' blocks the rank holds (not yet
// handed to DrainFreed).
func (p *Producer) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// Close stops the writer: WRITEs in flight are cancelled and reported to
// decode with PUSH_FAIL, as are registrations still waiting; every held
// request is freed (DrainFreed still returns them). It withdraws the rank
// from the side channel and deregisters the layout's memory. It is
// idempotent.
func (p *Producer) Close() error {
	if !engine.Closing(&p.mu, &p.closed) {
		return nil
	}
	p.cancel()
	p.poll.Stop()
	p.wg.Wait()
	p.stopLog()
	p.mu.Lock()
	unseen := p.finished
	for _, st := range p.progress {
		if p.w.core.holds[st.h.id] == nil { // reported, never seen by the writer
			unseen = append(unseen, st.h)
		}
	}
	p.finished, p.aborts, p.progressQ = nil, nil, nil
	p.closing = true // the ids shutdown frees wait for the deregistration
	p.mu.Unlock()
	for _, h := range unseen {
		p.w.core.holds[h.id] = h
	}
	p.w.shutdown()
	p.engine.core.Withdraw(p.cfg.Layout.WorldRank())
	err := engine.Deregister(p.cfg.Agent, p.cfg.Layout, &p.cfg.Staging)
	p.mu.Lock()
	p.freed = append(p.freed, p.lastFreed...)
	p.lastFreed = nil
	p.mu.Unlock()
	if err != nil && !errors.Is(err, nixl.ErrClosed) {
		return fmt.Errorf("pushconn: deregister KV memory: %w", err)
	}
	return nil
}

// free hands a request's blocks back to the engine; while closing, only
// once the memory is deregistered, so no WRITE can still read blocks the
// engine reuses.
func (p *Producer) free(id string) {
	p.mu.Lock()
	delete(p.held, id)
	delete(p.aborting, id)
	delete(p.progress, id)
	if p.closing {
		p.lastFreed = append(p.lastFreed, id)
	} else {
		p.freed = append(p.freed, id)
	}
	p.mu.Unlock()
}

func (p *Producer) now() time.Time { return p.cfg.Clock.Now() }
