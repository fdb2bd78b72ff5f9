package pullconn

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/internal/tracing"
	"github.com/gonixl/gonixl/internal/vllm"
	"github.com/gonixl/gonixl/internal/xfertime"
	"github.com/gonixl/gonixl/nixl"
)

// A decode rank is a Consumer around a reader. The reader is the pull
// protocol's decode side as a state machine, in the style of etcd's raft:
// it is fed events (a load routed, a handshake's, hold query's, pin's or
// readiness query's answer, a tick with its clock readings) and acts only
// through two interfaces: transfers (post, poll and let go of READs, send
// notifications) and edges (start a side-channel exchange, publish a
// result, the engine-facing state). It starts no goroutine, takes no lock
// and reads no clock but the readings it is given (now, mono, steady): the
// Consumer runs it under its work lock on the reader goroutine
// (exchange.go), and the deterministic simulation (simdecode_test.go) runs
// the same code on its simulated network, agents and clocks. Its parts are
// types of their own: engines (the prefill engines it knows), restarts,
// pinner, holdWatch, stager.

// maxHeartbeatLen bounds one heartbeat message.
const maxHeartbeatLen = 16 << 10

func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// transfers is what the reader does with its NIXL agent: READs posted,
// polled and let go of, notifications sent, a peer's metadata unloaded.
type transfers interface {
	CreateXferReq(op nixl.XferOp, local, remote nixl.XferList, remoteAgent string, opts *nixl.Options) (nixl.XferHandle, error)
	PostXferReq(req nixl.XferHandle, opts *nixl.Options) (nixl.Status, error)
	XferStatus(req nixl.XferHandle) (nixl.Status, error)
	ReleaseXferReqs(reqs []nixl.XferHandle, errs []error) error
	GenNotif(remote string, msg []byte, opts *nixl.Options) error
	InvalidateRemoteMD(remote string) error
}

// agentTransfers are an agent's transfers.
type agentTransfers struct{ nixl.Agent }

func (a agentTransfers) ReleaseXferReqs(reqs []nixl.XferHandle, errs []error) error {
	return nixl.ReleaseXferReqs(a.Agent, reqs, errs)
}

// edges are the reader's ways out other than its agent. An exchange on the
// side channel (handshake, hold query, pin, readiness query) starts there
// and comes back later as an event; each reports false, starting nothing,
// once the rank is closed. The engine-facing state (KeepAlives, loads
// queued for the reader, results) lives there too.
type edges interface {
	handshake(r *remote) bool
	queryHolds(r *remote, ids []string) bool
	confirm(r *remote, loads []*load, refs []handshake.HoldRef) bool
	queryReady(l *load, q handshake.ReadyQuery) bool
	// forget drops the shared handshake with r's engine.
	forget(r *remote)
	isClosed() bool
	// published hands an ended load's result to Drain.
	published(l *load)
	// keepAlives drops the KeepAlives past their timeout at now and
	// returns the others' params; kept returns them all.
	keepAlives(now time.Time) []*Params
	kept() []*Params
	// dropKeepAlives drops the KeepAlives of engine key, whose handshake
	// failed with err.
	dropKeepAlives(key string, err error)
	// refers reports whether a KeepAlive or a load not yet routed names
	// engine key.
	refers(key string) bool
	// takeReadied takes the readiness answers that open chunks, for a scatter
	// to post at once (readyProgress).
	takeReadied() []readyAnswer
}

// readerRules are rules this revision replaced or must never break, as
// switches for the simulation, which shows what they let through.
// Production leaves them zero.
type readerRules struct {
	// handshakeClock: the handshake's clock offset is never updated by
	// hold queries (the rules of b6a750d).
	handshakeClock bool
	// noPinWindow: done whenever the pin was granted, however late the
	// READs ended; shortPin, if set, is the pin asked for instead of
	// TransferTimeout + ExpiryMargin. Both are wrong.
	noPinWindow bool
	shortPin    time.Duration
}

// reader is a decode rank's protocol state (see the top of this file).
type reader struct {
	cfg       *rankConfig // durations, layout, policy; never its Agent or Clock
	vllm      bool        // the engine speaks vLLM's protocol
	hsTimeout time.Duration
	// now reads the rank's clock (RankConfig.Clock), mono its monotonic
	// time (lease.MonoNow: when an ended load whose READ the agent would
	// not let go of gives its blocks back), steady this process's
	// monotonic clock (time.Now: pins, on both sides, and transfer times).
	now, mono, steady func() time.Time
	xfer              transfers
	io                edges
	log               *zap.Logger
	stats             *stats.Set
	rules             readerRules

	eng     *engines
	restart *restarts
	reading []*load
	ready   []*load // handshake done, to post on the next Drain (Inline)
	// unblocked are loads whose awaited chunks became ready, to post on
	// the next Drain (Inline).
	unblocked []*load
	pins      *pinner
	lastHB    time.Time
	scratch   descriptors.Transfer // mapping lists, reused by post
	// draining are loads that ended but whose READs the agent has not yet
	// let go of: their result waits until no byte can land in their blocks.
	draining []*load
	holds    *holdWatch
	stage    *stager

	stuck                      *stats.Counter
	holdQueries, failedQueries *stats.Counter

	// times picks where transfer and post times come from (NIXL's
	// telemetry or steady); spans records the traced requests' spans
	// (nil: none).
	times *xfertime.Source
	spans *tracing.Book
}

// newReader returns a reader of a rank configured as cfg, acting
// through xfer and io; the caller sets its clocks, its protocol, its
// counters and, for staging, its stager's pool.
func newReader(cfg *rankConfig, xfer transfers, io edges, log *zap.Logger, st *stats.Set) *reader {
	c := &reader{cfg: cfg, xfer: xfer, io: io, log: log, stats: st}
	c.eng = &engines{rd: c, remotes: map[string]*remote{}}
	c.restart = &restarts{rd: c}
	c.pins = &pinner{rd: c, awaitingPin: map[*load]struct{}{}}
	c.holds = &holdWatch{rd: c, confirmed: map[string]time.Time{}, margin: cfg.ExpiryMargin}
	c.stage = &stager{rd: c}
	return c
}

// tick is one round of the reader: handshake results, new loads, READ
// polling, heartbeats.
func (c *reader) tick(queued []*load, done []handshakeDone, answers []holdAnswer, readied []readyAnswer) {
	for _, d := range done {
		c.applyHandshake(d)
	}
	for _, a := range answers {
		c.holds.applyHoldAnswer(a)
	}
	for _, a := range readied {
		c.stage.applyReady(a)
	}
	for _, l := range queued {
		c.route(l)
	}
	// KeepAlives after the handshakes: one whose handshake just failed was
	// dropped and starts no new one.
	waiting := c.io.keepAlives(c.now())
	for _, p := range waiting {
		c.eng.remoteFor(p.RemoteEngineID, joinHostPort(p.RemoteHost, p.RemotePort), p.TPSize)
	}
	c.stage.retryReady(c.now())
	c.pollReads()
	c.pins.askPins()
	c.drain(c.mono())
	if len(c.holds.confirmed) > 64+4*(len(c.reading)+len(c.ready)+len(waiting)) {
		c.holds.prune(c.holds.expected())
	}
	// The period starts at the first heartbeat actually sent, so a request
	// gets one as soon as its engine is ready.
	if now := c.now(); now.Sub(c.lastHB) >= c.cfg.HeartbeatInterval && c.holds.heartbeat() {
		c.lastHB = now
	}
}

// busy reports whether the reader has work that its next tick does.
func (c *reader) busy() bool { return len(c.reading)+len(c.draining)+len(c.pins.awaitingPin) > 0 }

// route sends a load to its engine: posted now if the handshake is done,
// else parked until it is.
func (c *reader) route(l *load) {
	if l.ended {
		return
	}
	addr := joinHostPort(l.p.RemoteHost, l.p.RemotePort)
	c.eng.checkGeneration(l.p.RemoteEngineID+"@"+addr, l.p.RemoteRegistrationGeneration)
	r := c.eng.remoteFor(l.p.RemoteEngineID, addr, l.p.TPSize)
	r.generation = max(r.generation, l.p.RemoteRegistrationGeneration)
	l.r = r
	r.lastActive = c.now()
	if r.ready {
		c.post(l)
		return
	}
	if c.io.isClosed() {
		c.fail(l, errClosed)
		return
	}
	if c.spans.Traced(l.id) {
		l.parkedAt = time.Now()
	}
	r.parked = append(r.parked, l)
}

// handshakeSpan records the traced loads' wait for handshake d.
func (c *reader) handshakeSpan(d handshakeDone, parked []*load) {
	for _, l := range parked {
		if !l.parkedAt.IsZero() {
			c.spans.Record(l.id, tracing.Handshake, l.parkedAt, time.Now(), d.err,
				attribute.String("gonixl.remote_engine_id", d.r.engineID), attribute.String("gonixl.remote_addr", d.r.addr))
		}
	}
}

// applyHandshake makes an engine ready, or fails the loads that waited for
// it and forgets it so the next request tries again.
func (c *reader) applyHandshake(d handshakeDone) {
	r := d.r
	if c.eng.remotes[r.key] == r && d.err != nil {
		delete(c.eng.remotes, r.key)
	}
	parked := r.parked
	r.parked = nil
	c.handshakeSpan(d, parked)
	if errors.Is(d.err, errClosed) {
		for _, l := range parked {
			c.fail(l, errClosed)
		}
		return
	}
	if d.err != nil {
		c.stats.FailedHandshakes.Inc()
		c.log.Warn("pullconn: handshake failed", zap.String("remote_engine_id", r.engineID), zap.String("addr", r.addr), zap.Error(d.err))
		err := fmt.Errorf("pullconn: %w", d.err) // errors.Is(err, connector.ErrHandshake) or connector.ErrIncompatible
		if errors.Is(d.err, syscall.ECONNREFUSED) {
			// Most often a prefill engine that shut down after it answered.
			err = fmt.Errorf("pullconn: %w (nothing listens at %s: the prefill engine shut down, or has not started)", d.err, r.addr)
		}
		for _, l := range parked {
			c.fail(l, err)
		}
		// KeepAlives of that engine stop too: they would otherwise start a
		// handshake on every tick. Their Load, if it comes, handshakes again.
		c.io.dropKeepAlives(r.key, d.err)
		return
	}
	r.ready, r.setup = true, d.set
	r.clock = handshake.Clock{Offset: d.set.payload.ClockOffset, Uncertainty: d.set.payload.ClockUncertainty}
	if c.cfg.Inline {
		c.ready = append(c.ready, parked...)
		return
	}
	for _, l := range parked {
		c.post(l)
	}
}

// postReady posts, on an Inline Drain, the loads whose handshake finished
// and the chunks that became ready since; it reports whether there were
// any.
func (c *reader) postReady() bool {
	ready, unblocked := c.ready, c.unblocked
	c.ready, c.unblocked = nil, nil
	for _, l := range ready {
		c.post(l)
	}
	for _, l := range unblocked {
		if err := c.stage.postReady(l); err != nil {
			c.fail(l, err)
		}
	}
	return len(ready)+len(unblocked) > 0
}

// post maps a load's blocks and posts one READ per prefill rank it reads,
// each carrying the completion for that rank.
func (c *reader) post(l *load) {
	if l.ended {
		return // aborted while it waited
	}
	if !c.restart.sameIncarnation(l) || !c.restart.retried(l) {
		return
	}
	set := l.r.setup
	msg, err := notif.EncodeCompletion(l.p.RemoteRequestID, c.completionN(set))
	if err != nil {
		c.fail(l, invalidf("request %q: %v", l.id, err))
		return
	}
	if len(l.local) == 0 {
		l.after = set.notify
		c.succeed(l)
		return
	}
	if l.p.TPSize != set.payload.TPSize {
		c.fail(l, invalidf("request %q: Params.TPSize is %d, engine %q has TP size %d", l.id, l.p.TPSize, set.payload.EngineID, set.payload.TPSize))
		return
	}
	var cached int // a grouped load's lists are suffixes: no count to work out
	if l.groups == nil {
		if cached, err = cachedBlocks(&l.p, set.payload.BlockSize, c.cfg.Layout.BlockSize, len(l.local)); err != nil {
			c.fail(l, err)
			return
		}
	}
	req := descriptors.Request{SrcBlocks: l.p.RemoteBlockIDs, DstBlocks: l.local, DstCached: cached}
	hold, guarded := c.holds.deadline(l)
	if now := c.now(); guarded && !now.Before(hold) {
		c.expired(l, now, hold, "before its READ was posted")
		return
	}
	start := c.steady()
	var posted time.Time // wall clock, for the request's post span
	if c.spans.Traced(l.id) {
		posted = time.Now()
	}
	ownPost := !c.times.PostsByNIXL()
	var notified []int
	for _, s := range set.sources {
		// The lists are reused from request to request: agents copy them in
		// CreateXferReq, and a fragmented request would otherwise allocate
		// megabytes each time.
		src := &set.payload.Ranks[s].Layout
		var scatter bool
		var plan staging.ReadPlan
		var blocks *staging.BlockCopy
		same := c.stage.pool != nil && l.groups == nil && l.p.RemoteStagingSlot != nil && staging.SameBlocks(src, &c.cfg.Layout) &&
			len(l.p.RemoteBlockIDs)-cached == len(l.local)
		if same {
			// Whole blocks one to one: a staged READ needs no mapping
			// (the largest CPU cost of a fragmented request), and the
			// model only the runs.
			scatter, plan, blocks = c.stage.read(l, s, nil, staging.SameBlocksDescs(src, l.p.RemoteBlockIDs[cached:], l.local),
				uint64(len(l.local))*uint64(len(src.Regions))*src.BlockLen(), cached)
		}
		tr := &c.scratch
		if !scatter {
			if err := c.mapInto(tr, l, src, req); err != nil {
				c.fail(l, fmt.Errorf("%w: request %q from prefill rank %d: %v", errInvalid, l.id, s, err))
				return
			}
			if tr.Len() == 0 {
				continue
			}
			if !same {
				scatter, plan, blocks = c.stage.read(l, s, tr, tr.Len(), tr.Bytes, cached)
			}
		}
		var local, remote nixl.XferList
		var bytes uint64
		var descs int
		switch {
		case scatter && blocks != nil && staging.ChunkCount(len(blocks.Bases), c.cfg.Staging.Chunks) > 1:
			if err := c.stage.postChunks(l, s, plan, blocks, l.p.RemoteStagingAwait); err != nil {
				c.restart.readFailed(l, s, err, false)
				return
			}
			// Its completion goes out once every chunk is read (below,
			// after): a chunk's READ cannot carry it, since prefill frees
			// the slot on it while later chunks are still read.
			continue
		case scatter:
			local, remote = staging.SplitLists(plan.Local, plan.Remote, c.cfg.Staging.TransferChunk)
			bytes, descs = plan.Bytes, len(local.Descs)
			if l.p.RemoteStagingAwait {
				// Posted once prefill rank s has gathered its whole image;
				// its completion goes out once the load is done.
				l.pendingRead(&xfer{rank: s, bytes: bytes, descs: descs, scatter: plan.Scatter, scatterBlocks: blocks}, local, remote, len(src.Regions))
				continue
			}
		default:
			local, remote = tr.Sides(nixl.Read)
			bytes, descs = tr.Bytes, tr.Len()
		}
		opts := nixl.NotifOptions(msg)
		if l.r.pins() {
			// The pin travels beside the READ; the completion, naming the
			// hold, goes out once the load is done.
			opts = nil
		}
		h, err := c.xfer.CreateXferReq(nixl.Read, local, remote, set.agents[s], opts)
		if err == nil {
			l.xfers = append(l.xfers, &xfer{h: h, rank: s, bytes: bytes, descs: descs, scatter: plan.Scatter, scatterBlocks: blocks})
			var st nixl.Status
			st, err = c.xfer.PostXferReq(h, nil)
			x := l.xfers[len(l.xfers)-1]
			x.start, x.postTimed = c.steady(), ownPost
			if err == nil && st == nixl.StatusSuccess {
				x.done = true
				c.transferDone(l, x)
			}
		}
		if err != nil {
			c.restart.readFailed(l, s, err, false)
			return
		}
		if !l.r.pins() {
			notified = append(notified, s)
			// The READ carries the completion: once posted, prefill may
			// count it whatever becomes of the load.
			c.markNotified(l)
		}
	}
	if ownPost {
		c.stats.RecordPost(c.steady().Sub(start))
	}
	if !posted.IsZero() {
		c.spans.Record(l.id, tracing.Post, posted, time.Now(), nil, attribute.Int("gonixl.transfers", len(l.xfers)))
	}
	for _, s := range set.notify {
		if !slices.Contains(notified, s) {
			l.after = append(l.after, s)
		}
	}
	l.deadline = c.now().Add(c.cfg.TransferTimeout)
	if l.await != nil {
		c.stage.askReady(l)
	}
	if l.r.pins() && len(l.xfers) > 0 {
		// Pinned while the READs run: the pin travels beside them, so it
		// adds to the critical path only what outlasts the READs.
		c.pins.toPin = append(c.pins.toPin, l)
	}
	if l.allDone() {
		c.succeed(l)
		return
	}
	c.reading = append(c.reading, l)
}

// succeed ends a load whose READs all ended: done (finish) once they are
// certain to have read the request's bytes, after the pin when prefill
// pins.
func (c *reader) succeed(l *load) {
	if hold, guarded := c.holds.deadline(l); guarded && len(l.xfers) > 0 {
		// The READ finished, but only bytes read while prefill still held
		// the blocks are the request's: done only if that is certain now.
		if now := c.now(); !now.Before(hold) {
			c.expired(l, now, hold, "before its READ was seen complete")
			return
		}
	}
	if l.r.pins() && len(l.xfers) > 0 {
		l.readsEnded = c.steady()
		if l.pin == pinPending {
			// Done only once prefill pinned the hold for this engine;
			// the answer is still on its way.
			c.pins.awaitingPin[l] = struct{}{}
			return
		}
		c.pins.pinnedReadEnded(l)
		return
	}
	c.finish(l)
}

// finish ends a load whose READs ended and are trusted: the scatter out of
// the staging slot, then the completions no READ carried, then done.
func (c *reader) finish(l *load) {
	c.releaseXfers(l)
	c.markNotified(l)
	if err := c.stage.scatter(l); err != nil {
		c.fail(l, err)
		return
	}
	if len(l.after) > 0 {
		// To a prefill that pins, the completion names the hold it read
		// (its key), so a late copy never releases a later hold of the id.
		var key uint64
		if l.r.pins() {
			key = l.hold
		}
		msg, _ := notif.EncodeSeqCompletion(l.p.RemoteRequestID, c.completionN(l.r.setup), key)
		for _, s := range l.after {
			if err := c.xfer.GenNotif(l.r.setup.agents[s], msg, nil); err != nil {
				// The data is here; prefill frees by lease instead.
				c.stats.FailedNotifications.Inc()
				c.log.Warn("pullconn: completion not sent", zap.String("request_id", l.id), zap.Int("prefill_rank", s), zap.Error(err))
			}
		}
	}
	c.end(l, connector.Result{RequestID: l.id})
}

// pollReads checks every READ in flight once.
func (c *reader) pollReads() {
	if len(c.reading) == 0 {
		return
	}
	now := c.now()
	keep := c.reading[:0]
	for _, l := range c.reading {
		if !l.ended && c.pollLoad(l, now) {
			keep = append(keep, l)
		}
	}
	clear(c.reading[len(keep):])
	c.reading = keep
}

// pollLoad reports whether l is still in flight.
func (c *reader) pollLoad(l *load, now time.Time) bool {
	for _, x := range l.xfers {
		if l.postErr != nil {
			c.fail(l, l.postErr)
			return false
		}
		if x.done || x.pending {
			continue
		}
		st, err := c.xfer.XferStatus(x.h)
		if err != nil {
			c.restart.readFailed(l, x.rank, err, true)
			return false
		}
		if st == nixl.StatusSuccess {
			x.done = true
			if !x.part {
				c.transferDone(l, x)
			}
			if x.scatterBlocks != nil && !l.allDone() {
				// Pipelined: this chunk is scattered while the later ones
				// are still read. The load still holds its blocks.
				if err := c.stage.scatterOne(l, x); err != nil {
					c.fail(l, err)
					return false
				}
			}
		}
	}
	if l.postErr != nil {
		c.fail(l, l.postErr)
		return false
	}
	if l.allDone() {
		c.succeed(l)
		return false
	}
	if hold, guarded := c.holds.deadline(l); guarded && !now.Before(hold) && hold.Before(l.deadline) {
		c.stats.FailedTransfers.Inc()
		c.expired(l, now, hold, "while its READ was in flight")
		return false
	}
	if !now.Before(l.deadline) {
		c.stats.FailedTransfers.Inc()
		c.fail(l, fmt.Errorf("%w: request %q: READ from engine %q still in flight after %v", ErrTimeout, l.id, l.p.RemoteEngineID, c.cfg.TransferTimeout))
		return false
	}
	return true
}

// expired fails a load whose prefill hold no longer certainly covers its
// READ.
func (c *reader) expired(l *load, now, hold time.Time, when string) {
	c.stats.ExpiredRequests.Inc()
	c.fail(l, fmt.Errorf("%w: request %q: prefill engine %q holds its blocks until %v on this clock (margin and clock offset deducted), and it is %v, %s",
		ErrExpired, l.id, l.p.RemoteEngineID, hold.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), when))
}

// markNotified records that a completion of the load may have reached
// prefill, which may then free the blocks: the remote request must not be
// loaded again by this rank until its hold's deadline.
func (c *reader) markNotified(l *load) {
	if l.completed {
		return
	}
	l.completed = true
	l.readUntil = c.now().Add(c.cfg.TransferTimeout + c.cfg.KeepAliveTimeout)
	if hold, guarded := c.holds.deadline(l); guarded {
		l.readUntil = hold.Add(c.cfg.ExpiryMargin)
	}
}

// completionN is the number a completion to a prefill engine of set carries:
// decode's TP size in gonixl's protocol (prefill works out how many
// completions that means), or, in vLLM's since its connector version 12,
// the completions each prefill rank gets, max(1, decode TP / prefill TP).
func (c *reader) completionN(set *pairing) int {
	if c.vllm {
		return vllm.CompletionCount(c.cfg.Layout.TPSize, set.payload.TPSize)
	}
	return c.cfg.Layout.TPSize
}

// end ends a request exactly once: its result is published as soon as
// none of its READs can still write into its blocks.
func (c *reader) end(l *load, res connector.Result) {
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

// transferDone records READ x of load l, complete and not yet released:
// its times (NIXL's telemetry where the agent has it) and its span.
func (c *reader) transferDone(l *load, x *xfer) {
	own := c.steady().Sub(x.start)
	var t xfertime.Times
	if x.scatterBlocks == nil {
		// One READ, not the last of a pipelined staged one's chunks.
		t = c.times.Finished(x.h, own)
	} else {
		t = c.times.Own(own)
	}
	c.stats.RecordTransfer(x.bytes, x.descs, t.Xfer)
	if t.By == xfertime.ByNIXL && !x.postTimed {
		c.stats.RecordPost(t.Post)
	}
	if c.spans.Traced(l.id) {
		start, end := t.Span()
		c.spans.Record(l.id, tracing.Transfer, start, end, nil, tracing.TransferAttrs(x.rank, x.bytes, x.descs, t.By, t.Post)...)
	}
}

// publish hands an ended load's result to Drain.
func (c *reader) publish(l *load) {
	c.stage.release(l)
	now := c.now()
	l.result.Start, l.result.End = l.start, now
	if l.completed {
		if hold, guarded := c.holds.deadline(l); guarded {
			// Hold queries may have moved the deadline since the completion.
			l.readUntil = maxTime(l.readUntil, hold.Add(c.cfg.ExpiryMargin))
		}
		// Bounded: no hold lasts longer than a keep-alive plus a transfer.
		l.readUntil = minTime(l.readUntil, now.Add(c.cfg.KeepAliveTimeout+c.cfg.TransferTimeout))
	}
	c.io.published(l)
	c.holds.forget(l)
}

func (c *reader) fail(l *load, err error) {
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
func (c *reader) releaseXfers(l *load) bool {
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
	if err := c.xfer.ReleaseXferReqs(hs, errs); err != nil {
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
func (c *reader) drain(mono time.Time) {
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

// findLoad looks for a routed load that has not ended.
func (c *reader) findLoad(id string) *load {
	for _, set := range [][]*load{c.reading, c.ready} {
		for _, l := range set {
			if l.id == id && !l.ended {
				return l
			}
		}
	}
	for l := range c.pins.awaitingPin {
		if l.id == id && !l.ended {
			return l
		}
	}
	for _, r := range c.eng.remotes {
		for _, l := range r.parked {
			if l.id == id && !l.ended {
				return l
			}
		}
	}
	return nil
}

// close ends every load with errClosed (Close): each is published once the
// agent lets go of its READs.
func (c *reader) close() {
	for _, l := range c.reading {
		c.fail(l, errClosed)
	}
	c.reading = nil
	for l := range c.pins.awaitingPin {
		c.fail(l, errClosed)
	}
	clear(c.pins.awaitingPin)
	for _, l := range c.ready {
		c.fail(l, errClosed)
	}
	c.ready = nil
	for _, r := range c.eng.remotes {
		for _, l := range r.parked {
			c.fail(l, errClosed)
		}
		r.parked = nil
	}
	c.drain(c.mono())
}

// abandon publishes what still drains once the memory is deregistered: a
// READ the agent would not release has nowhere left to write.
func (c *reader) abandon() {
	for _, l := range c.draining {
		c.stuck.Inc()
		c.publish(l)
	}
	c.draining = nil
}
