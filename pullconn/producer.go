package pullconn

import (
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/groupids"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/lease"
	"github.com/gonixl/gonixl/internal/lograte"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/poller"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/internal/tracing"
)

// recentExpired is how many expired request ids a Producer remembers to
// count late completions apart from unknown ones.
const recentExpired = 1 << 16

// Producer is one prefill TP rank: it holds finished requests' blocks until
// decode has read them or their lease expires. Its poller goroutine receives
// completions and heartbeats and expires leases. All methods are safe for
// concurrent use.
type Producer struct {
	e     *pullEngine
	cfg   rankConfig
	stats *stats.Set
	log   *zap.Logger
	spans *tracing.Book // the traced requests' hold spans

	aborted    *stats.Counter
	dropped    *stats.Counter
	duplicates *stats.Counter
	foreign    *stats.Counter
	stale      *stats.Counter
	notHeld    *stats.Counter
	plain      *stats.Counter
	// plainWarn limits the warnings of refused plain completions, which
	// any agent that loaded the rank's metadata can send at will.
	plainWarn *lograte.Limiter

	// mu guards hold, the rank's protocol (holder: its closed flag is the
	// Producer's), and freed.
	mu    sync.Mutex
	hold  *holder
	freed []string

	poll    *poller.Poller
	stopLog func()

	// Staging (nil without RankConfig.Staging): the counters, the cost
	// model, and the slot index each held request was gathered into (mu).
	stage *staging.Counters
	model staging.Model
	slots map[string]int
	// gathers are the background gathers of held requests (mu), until
	// their hold ends; gatherWG waits for their goroutines.
	gathers  map[string]*gatherJob
	gatherWG sync.WaitGroup
}

// NewProducer registers cfg.Layout's memory with cfg.Agent, publishes the
// rank on the engine's side channel and starts its poller.
func NewProducer(pub *connector.Engine, config Config) (*Producer, error) {
	e, err := engineOf(pub)
	if err != nil {
		return nil, err
	}
	if err := config.checkSide(true); err != nil {
		return nil, err
	}
	cfg, err := newRankConfig(e, config)
	if err != nil {
		return nil, err
	}
	h, err := newHolds(e.core.Config().TPSize, cfg.Lease, recentExpired)
	if err == nil {
		// In gonixl's protocol the engine answers pins (its payload says
		// Confirms), so every decode names the hold it read.
		h.countGiven, h.keyed = e.core.VLLM(), !e.core.VLLM()
	}
	if err != nil {
		return nil, invalidf("RankConfig.Lease: %v", err)
	}
	p := &Producer{e: e, cfg: cfg, stats: stats.New(), spans: tracing.New(cfg.TracerProvider), log: cfg.Log(e.ID(), "prefill")}
	p.hold = &holder{h: h, rank: cfg.Layout.TPRank, lease: cfg.Lease, extension: cfg.HeartbeatExtension, vllm: e.core.VLLM(), out: producerEdges{p}}
	if cfg.Staging.Enabled() {
		if err := e.slots.join(&cfg.Staging, cfg.ParamsAfterAllRanks); err != nil {
			return nil, invalidf("%v", err)
		}
		p.stage, p.model, p.slots = staging.NewCounters(p.stats), staging.NewModel(&cfg.Staging), map[string]int{}
		p.gathers = map[string]*gatherJob{}
	}
	if err := e.addProducer(cfg.Layout.TPRank, p); err != nil {
		p.leaveSlots()
		return nil, err
	}
	inc, err := e.core.PublishStaged(cfg.Agent, cfg.Layout, &cfg.Staging)
	if err != nil {
		e.removeProducer(cfg.Layout.TPRank, p)
		p.leaveSlots()
		return nil, err
	}
	e.published(cfg.Layout.TPRank, p, inc)
	p.aborted = p.stats.Counter("aborted_requests", "Requests the engine aborted (Abort).")
	p.dropped = p.stats.Counter("dropped_holds", "Holds released by DropHolds (the engine going away) before any decode engine read them.")
	p.duplicates = p.stats.Counter("duplicate_completions", "Second completions from one decode agent for one hold, not counted.")
	p.foreign = p.stats.Counter("foreign_completions", "Completions or confirmations from a decode engine other than the one a hold is bound to, not counted.")
	p.stale = p.stats.Counter("stale_completions", "Completions naming another hold of the id than the one held (a late copy): not counted.")
	p.notHeld = p.stats.Counter("unconfirmed_holds", "Pins answered \"not held\": no such hold, other blocks, bound to another decode engine, or a pin longer than granted.")
	p.plain = p.stats.Counter("refused_plain_completions", "Plain completions (\"<id>:<n>\", no hold key) for a held request in gonixl's protocol, whose decodes name the hold they read: from no decode of it, not counted.")
	p.plainWarn = lograte.New(plainWarnEvery, lease.MonoNow(cfg.Clock))
	p.poll = cfg.Poller("pullconn", p.log, p.busy, p.tick)
	p.poll.Handle(notif.HeartbeatPrefix, p.onHeartbeat)
	p.poll.Handle("", p.onCompletion)
	p.poll.Start()
	p.stopLog = engine.StartStatsLog(cfg.Logger, cfg.StatsInterval, p.stats, e.ID(), cfg.Layout.TPRank, "prefill")
	return p, nil
}

// RequestFinished holds blockIDs for requestID, starts their lease and
// returns the Params to send to decode. Every rank of the engine returns the
// same Params for the same call: the first rank to finish the request fixes
// its deadline and hold nonce, and the others take them however late they
// come, unless a rank's hold of the id ended in between (completion,
// expiry, DropHolds, Close): then a later rank holds afresh, its Params
// differ, and decode's pin to it is refused (ErrNotHeld), never done on
// wrong bytes. A rank that finishes an id again is a new request of the
// id, with Params of its own. An id already held, an id containing ','
// (it could not travel in a heartbeat) or a block id outside the layout is
// refused with an error and changes nothing.
func (p *Producer) RequestFinished(requestID string, blockIDs []int) (Params, error) {
	if err := p.checkFinished(requestID); err != nil {
		return Params{}, err
	}
	if len(p.cfg.Layout.Groups) > 0 {
		return Params{}, invalidf("request %q: the layout has %d KV-cache groups: use RequestFinishedGroups", requestID, len(p.cfg.Layout.Groups))
	}
	for i, b := range blockIDs {
		if b < 0 || b >= p.cfg.Layout.NumBlocks {
			return Params{}, invalidf("request %q: blockIDs[%d] is %d, layout has %d blocks", requestID, i, b, p.cfg.Layout.NumBlocks)
		}
	}
	return p.requestFinished(requestID, append([]int(nil), blockIDs...), nil, 0)
}

// checkFinished checks a request id given to RequestFinished or
// RequestFinishedGroups.
func (p *Producer) checkFinished(requestID string) error {
	if requestID == "" || len(requestID) > notif.MaxIDLen || strings.IndexByte(requestID, ',') >= 0 {
		return invalidf("request id %q: want 1..%d bytes without ','", requestID, notif.MaxIDLen)
	}
	// A closed Engine serves no side channel: no decode engine could find
	// the hold, so it is not taken.
	return p.e.core.CheckOpen()
}

// requestFinished holds a checked request: blocks for one group, or
// groups (blocks then nil) with the tokens they cover.
func (p *Producer) requestFinished(requestID string, blocks []int, groups [][]int, tokens int) (Params, error) {
	p.mu.Lock()
	closed, held := p.hold.closed, p.hold.held(requestID)
	p.mu.Unlock()
	if closed {
		return Params{}, errClosed
	}
	var slot *int
	var job *gatherJob // a background gather, started with the hold
	if p.stage != nil && !held && groups == nil && p.background() {
		var err error
		if job, err = p.prepareGather(requestID, blocks); err != nil {
			return Params{}, err
		}
		if job != nil {
			slot = &job.slot
		}
	} else if p.stage != nil && !held {
		// Gathered before the hold starts: a failed gather leaves nothing
		// held. The blocks are the engine's finished ones and do not move.
		gather := func() (int, bool, error) { return p.gather(requestID, blocks) }
		if groups != nil {
			gather = func() (int, bool, error) { return p.gatherGroups(requestID, groups) }
		}
		i, staged, err := gather()
		if err != nil {
			return Params{}, err
		}
		if staged {
			slot = &i
		}
	}
	base := Params{
		TransferParams:     engine.Public.Params(p.e.core, requestID, blocks).(connector.TransferParams),
		PPSize:             1,
		TransferMode:       handshake.ModePull,
		RemoteStagingSlot:  slot,
		RemoteStagingAwait: job != nil,
	}
	ids := blocks
	if groups != nil {
		base.RemoteBlockIDs, base.RemoteGroupBlockIDs, base.NumTokens = nil, groupids.Copy(groups), tokens
		ids = groupids.Flatten(groups)
	}
	if p.e.core.VLLM() {
		base.RemoteRegistrationGeneration = p.e.core.RegistrationGeneration()
	}
	p.mu.Lock()
	params, err := p.hold.finish(requestID, ids, p.cfg.Clock.Now(), time.Now(), base)
	if err == nil && slot != nil {
		p.slots[requestID] = *slot
	}
	if err == nil && job != nil {
		job.key = params.holdKey()
		p.startGather(requestID, job, blocks)
	}
	p.mu.Unlock()
	if err != nil {
		p.releaseSlot(slot)
		return Params{}, err
	}
	p.poll.Wake() // switch to the fast polling period
	return params, nil
}

// Abort tells the rank that the engine dropped request requestID: its hold
// is no longer extended by heartbeats, and its blocks come out of
// DrainFreed when every decode rank has notified or when the deadline the
// rank last gave decode passes, whichever is first. They are not freed at
// once: a decode READ may be in flight, and decode trusts the blocks until
// that deadline. An unknown id, or a second call, does nothing. It returns
// an error matching connector.ErrClosed after Close.
func (p *Producer) Abort(requestID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold.closed {
		return errClosed
	}
	if p.hold.abort(requestID) {
		p.aborted.Inc()
	}
	return nil
}

// DropHolds is for an engine going away (why says so, e.g. "the prefill
// engine is shutting down"): it releases at once the holds no decode engine
// is reading, so that shutting down does not sit out leases for nobody, and
// tells their readers. Their ids come out of DrainFreed; a decode rank that
// then asks to pin one, as it posts its READs, is answered "it dropped the
// hold: <why>", and its load fails at once with ErrNotHeld carrying those
// words, never done (docs/pull.md, "Dropping holds"). A hold that a decode
// rank has pinned (its READs are in flight) is kept until its completions
// come, or its pin and lease end, and counted in kept.
//
// With unclaimedFor > 0 only the holds that no decode engine ever asked
// about (no hold query, pin or completion) and that were made at least
// unclaimedFor ago are released: a decode engine asks about a hold within
// moments of its Params, so such a hold is for nobody, while the others
// still have a reader on its way. 0 (or less) releases every hold not
// being read.
//
// In vLLM's protocol no decode asks (no pins, no hold queries) and a vLLM
// decode trusts the blocks until the deadline it was given: nothing is
// released; every hold is aborted as Abort does (no more extensions) and
// counted in kept. A later RequestFinished holds afresh. It returns an
// error matching connector.ErrClosed after Close.
func (p *Producer) DropHolds(why string, unclaimedFor time.Duration) (dropped, kept int, err error) {
	p.mu.Lock()
	if p.hold.closed {
		p.mu.Unlock()
		return 0, 0, errClosed
	}
	dropped, kept, aborted := p.hold.drop(time.Now(), unclaimedFor, why)
	p.aborted.Add(uint64(aborted))
	p.mu.Unlock()
	if dropped > 0 {
		p.log.Info("pullconn: dropped holds no decode engine is reading", zap.Int("dropped", dropped), zap.Int("kept", kept), zap.String("why", why))
	}
	return dropped, kept, nil
}

// DrainFreed returns, without blocking, the ids whose blocks the engine may
// free now: read by every decode rank that reads this rank, or expired, or
// released by Close. Each id is returned once.
func (p *Producer) DrainFreed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.freed
	p.freed = nil
	return out
}

// Held returns the number of requests whose blocks are held.
func (p *Producer) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hold.h.len()
}

// Stats returns the prefill rank's counters: holds that expired or were
// aborted, completions counted, duplicate, stale, foreign or plain (in
// gonixl's protocol, refused), pins refused
// (docs/metrics.md lists them).
func (p *Producer) Stats() connector.Stats { return engine.StatsOf[connector.Stats](p.stats) }

// Close stops the poller, withdraws the rank from the side channel, hands
// every still-held request to DrainFreed and deregisters the memory. It is
// idempotent.
func (p *Producer) Close() error {
	if !engine.Closing(&p.mu, &p.hold.closed) {
		return nil
	}
	p.poll.Stop()
	p.stopLog()
	p.e.core.Withdraw(p.cfg.Layout.TPRank)
	p.e.removeProducer(p.cfg.Layout.TPRank, p)
	// No gather may write a slot, or read a block, once Close returns.
	p.stopGathers()
	// Withdraw the memory from NIXL first: once DrainFreed hands the ids
	// out, the engine may reuse the blocks, and no decode READ may reach
	// them then.
	err := engine.Deregister(p.cfg.Agent, p.cfg.Layout, &p.cfg.Staging)
	p.mu.Lock()
	p.hold.releaseAll()
	p.mu.Unlock()
	p.leaveSlots()
	if p.stage != nil {
		p.e.slots.changed() // readiness queries waiting on this rank answer now
	}
	return err
}

func (p *Producer) busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hold.h.len() > 0
}

func (p *Producer) tick() {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	ids := p.hold.tick(now, time.Now())
	p.mu.Unlock()
	if len(ids) > 0 {
		p.log.Warn("pullconn: lease expired, releasing blocks decode never read", zap.Strings("request_ids", ids), zap.Duration("lease", p.cfg.Lease))
	}
}

func (p *Producer) onCompletion(sender string, msg []byte) {
	p.mu.Lock()
	c, out, err := p.hold.completion(sender, msg)
	p.mu.Unlock()
	p.countCompletion(out)
	if out == completionPlain {
		p.warnPlain(sender, c.ID)
		return
	}
	if err != nil {
		p.log.Debug("pullconn: completion ignored", zap.String("from", sender), zap.Error(err))
	}
}

// plainWarnEvery is how often at most a prefill rank warns of refused
// plain completions.
const plainWarnEvery = 10 * time.Second

// warnPlain warns, at most once per plainWarnEvery, that a plain
// completion from agent sender for held request id was refused: no decode
// of this engine sends one, so some other agent, which fetched the rank's
// metadata, tried to release a hold it does not read.
func (p *Producer) warnPlain(sender, id string) {
	ok, leftOut := p.plainWarn.Allow()
	if !ok {
		return
	}
	p.log.Warn("pullconn: plain completion refused: a decode of this engine names the hold it read",
		zap.String("from", sender), zap.String("request_id", id), zap.Uint64("left_out", leftOut),
		zap.String("why", "the sender is no gonixl decode reading this hold; the hold keeps its lease"))
}

// countCompletion counts what a completion or confirmation did, when it
// did not count.
func (p *Producer) countCompletion(out completionOutcome) {
	switch out {
	case completionUnknown:
		p.stats.UnknownNotifications.Inc()
	case completionLate:
		p.stats.LateNotifications.Inc()
	case completionInvalid:
		p.stats.MalformedNotifications.Inc()
	case completionDuplicate:
		p.duplicates.Inc()
	case completionForeign:
		p.foreign.Inc()
	case completionStale:
		p.stale.Inc()
	case completionPlain:
		p.plain.Inc()
	}
}

func (p *Producer) onHeartbeat(sender string, msg []byte) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	err := p.hold.heartbeat(msg, now)
	p.mu.Unlock()
	if err != nil {
		p.stats.MalformedNotifications.Inc()
		p.log.Debug("pullconn: dropped malformed heartbeat", zap.String("from", sender), zap.Error(err))
	}
}

// extendHolds serves this rank's part of a hold query (holder.extend).
func (p *Producer) extendHolds(reader, agent string, ids []string) []time.Time {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hold.extend(reader, agent, ids, now)
}

// pinHold answers one hold of a pin on this rank (holder.pin), timed on
// this process's monotonic clock.
func (p *Producer) pinHold(reader, agent string, ref handshake.HoldRef) string {
	p.mu.Lock()
	verdict, refused := p.hold.pin(reader, agent, ref, time.Now())
	p.mu.Unlock()
	switch {
	case refused:
		p.notHeld.Inc()
		p.log.Debug("pullconn: hold not pinned", zap.String("request_id", ref.ID), zap.String("reader", reader), zap.String("agent", agent), zap.String("why", verdict))
	case verdict == "":
		p.poll.Wake() // a pinned hold past its lease is released on a tick
	}
	return verdict
}

// producerEdges are a Producer's holder's actions, run under the
// Producer's lock.
type producerEdges struct{ p *Producer }

func (x producerEdges) advert(id string, rank int, now, own time.Time) advert {
	return x.p.e.advert(id, rank, now, own)
}

// released counts ids' holds by how they ended, then, so that a caller
// that sees the ids also sees the count, hands them to DrainFreed with
// their staging slots, and drops their adverts.
func (x producerEdges) released(ids []string, how holdEnd) {
	p := x.p
	switch how {
	case endExpiry:
		p.stats.ExpiredRequests.Add(uint64(len(ids)))
	case endDrop:
		p.dropped.Add(uint64(len(ids)))
	}
	p.freed = append(p.freed, p.releasedSlots(ids)...)
	p.e.dropAdverts(ids)
}
