package pullconn

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/vllm"
	"github.com/gonixl/gonixl/nixl"
)

// maxHeartbeatLen bounds one heartbeat message.
const maxHeartbeatLen = 16 << 10

func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// tick is one round of the reader: handshake results, new loads, READ
// polling, heartbeats. It runs on the poller goroutine.
func (c *Consumer) tick() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.qmu.Lock()
	queued, done, answers, readied := c.queue, c.hsDone, c.queried, c.readied
	c.queue, c.hsDone, c.queried, c.readied = nil, nil, nil, nil
	c.qmu.Unlock()

	for _, d := range done {
		c.applyHandshake(d)
	}
	for _, a := range answers {
		c.applyHoldAnswer(a)
	}
	for _, a := range readied {
		c.applyReady(a)
	}
	for _, l := range queued {
		c.route(l)
	}
	// KeepAlives after the handshakes: one whose handshake just failed was
	// dropped and starts no new one.
	waiting := c.keepAlives(c.cfg.Clock.Now())
	for _, p := range waiting {
		c.remoteFor(p.RemoteEngineID, joinHostPort(p.RemoteHost, p.RemotePort), p.TPSize)
	}
	c.retryReady(c.cfg.Clock.Now())
	c.pollReads()
	c.askPins()
	c.drain(c.mono())
	if len(c.confirmed) > 64+4*(len(c.reading)+len(c.ready)+len(waiting)) {
		c.pruneConfirmed()
	}
	// The period starts at the first heartbeat actually sent, so a request
	// gets one as soon as its engine is ready.
	if now := c.cfg.Clock.Now(); now.Sub(c.lastHB) >= c.cfg.HeartbeatInterval && c.heartbeat() {
		c.lastHB = now
	}
}

// keepAlives drops the KeepAlives past their timeout and returns the
// others' params. wmu is held.
func (c *Consumer) keepAlives(now time.Time) []*Params {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	var out []*Params
	for id, w := range c.waiting {
		if now.Sub(w.since) >= c.cfg.KeepAliveTimeout {
			// Nothing followed the KeepAlive: stop keeping prefill's blocks.
			delete(c.waiting, id)
			c.waitTimeouts.Inc()
			c.log.Warn("pullconn: KeepAlive without Load timed out; its heartbeats stop", zap.String("request_id", id), zap.Duration("keepalive_timeout", c.cfg.KeepAliveTimeout))
			continue
		}
		out = append(out, &w.p)
	}
	return out
}

// remoteFor returns the engine's state, starting its handshake if this is
// the first request for it (or the last handshake failed).
func (c *Consumer) remoteFor(engineID, addr string, tpSize int) *remote {
	key := engineID + "@" + addr
	if r, ok := c.remotes[key]; ok {
		return r
	}
	c.forgetStaleEngines(c.cfg.Clock.Now())
	r := &remote{key: key, engineID: engineID, addr: addr, tp: tpSize}
	if !c.startExchange() {
		return r // not kept: Close ends its loads
	}
	c.remotes[key] = r
	go c.handshake(r)
	return r
}

// route sends a load to its engine: posted now if the handshake is done,
// else parked until it is. wmu is held.
func (c *Consumer) route(l *load) {
	if l.ended {
		return
	}
	addr := joinHostPort(l.p.RemoteHost, l.p.RemotePort)
	c.checkGeneration(l.p.RemoteEngineID+"@"+addr, l.p.RemoteRegistrationGeneration)
	r := c.remoteFor(l.p.RemoteEngineID, addr, l.p.TPSize)
	r.generation = max(r.generation, l.p.RemoteRegistrationGeneration)
	l.r = r
	r.lastActive = c.cfg.Clock.Now()
	if r.ready {
		c.post(l)
		return
	}
	c.qmu.Lock()
	closed := c.closed
	c.qmu.Unlock()
	if closed {
		c.fail(l, errClosed)
		return
	}
	r.parked = append(r.parked, l)
}

// handshake fetches the engine's payload (shared by the engine's ranks,
// one fetch in flight), pairs this rank with it and loads the metadata of
// the prefill ranks it will contact. It runs on its own goroutine.
func (c *Consumer) handshake(r *remote) {
	defer c.hsWG.Done()
	set, err := c.connect(r)
	if err != nil && c.ctx.Err() != nil {
		// Close cancelled the fetch: the loads end because of the close,
		// and the handshake did not fail.
		err = errClosed
	}
	c.qmu.Lock()
	c.hsDone = append(c.hsDone, handshakeDone{r: r, set: set, err: err})
	c.qmu.Unlock()
	c.poll.Wake()
}

func (c *Consumer) connect(r *remote) (*pairing, error) {
	p, err := c.e.core.Client().Get(c.ctx, r.engineID, r.addr, r.tp)
	if err != nil {
		return nil, err
	}
	set, err := pair(p, &c.cfg.Layout)
	if err != nil {
		return nil, err
	}
	for _, s := range set.notify {
		// A prefill engine restarted under the same agent names replaces
		// the dead instance's metadata.
		name, err := engine.LoadPeerMD(c.cfg.Agent, p.Ranks[s].Agent, p.Ranks[s].Metadata)
		if err != nil {
			c.e.core.Client().Forget(r.engineID, r.addr)
			return nil, fmt.Errorf("%w: engine %q rank %d: load agent metadata: %v", connector.ErrHandshake, r.engineID, s, err)
		}
		if p.Ranks[s].Agent != "" && name != p.Ranks[s].Agent { // vLLM's payload names no agent: loading names it
			return nil, fmt.Errorf("%w: engine %q rank %d: metadata is agent %q, payload says %q", connector.ErrHandshake, r.engineID, s, name, p.Ranks[s].Agent)
		}
		set.agents[s] = name
	}
	return set, nil
}

// applyHandshake makes an engine ready, or fails the loads that waited for
// it and forgets it so the next request tries again. wmu is held.
func (c *Consumer) applyHandshake(d handshakeDone) {
	r := d.r
	if c.remotes[r.key] == r && d.err != nil {
		delete(c.remotes, r.key)
	}
	parked := r.parked
	r.parked = nil
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
		c.qmu.Lock()
		for id, w := range c.waiting {
			if w.p.RemoteEngineID+"@"+joinHostPort(w.p.RemoteHost, w.p.RemotePort) == r.key {
				delete(c.waiting, id)
				c.waitTimeouts.Inc()
				c.log.Warn("pullconn: KeepAlive dropped: the prefill engine's handshake failed", zap.String("request_id", id), zap.Error(d.err))
			}
		}
		c.qmu.Unlock()
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

// post maps a load's blocks and posts one READ per prefill rank it reads,
// each carrying the completion for that rank. wmu is held.
func (c *Consumer) post(l *load) {
	if l.ended {
		return // aborted while it waited
	}
	if !c.sameIncarnation(l) || !c.retried(l) {
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
	hold, guarded := c.holdDeadline(l)
	if now := c.cfg.Clock.Now(); guarded && !now.Before(hold) {
		c.expired(l, now, hold, "before its READ was posted")
		return
	}
	start := time.Now()
	var notified []int
	for _, s := range set.sources {
		// The lists are reused from request to request: agents copy them in
		// CreateXferReq, and a fragmented request would otherwise allocate
		// megabytes each time.
		src := &set.payload.Ranks[s].Layout
		var scatter bool
		var plan staging.ReadPlan
		var blocks *staging.BlockCopy
		same := c.pool != nil && l.groups == nil && l.p.RemoteStagingSlot != nil && staging.SameBlocks(src, &c.cfg.Layout) &&
			len(l.p.RemoteBlockIDs)-cached == len(l.local)
		if same {
			// Whole blocks one to one: a staged READ needs no mapping
			// (the largest CPU cost of a fragmented request), and the
			// model only the runs.
			scatter, plan, blocks = c.stagedRead(l, s, nil, staging.SameBlocksDescs(src, l.p.RemoteBlockIDs[cached:], l.local),
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
				scatter, plan, blocks = c.stagedRead(l, s, tr, tr.Len(), tr.Bytes, cached)
			}
		}
		var local, remote nixl.XferList
		var bytes uint64
		var descs int
		switch {
		case scatter && blocks != nil && staging.ChunkCount(len(blocks.Bases), c.cfg.Staging.Chunks) > 1:
			if err := c.postChunks(l, s, plan, blocks, l.p.RemoteStagingAwait); err != nil {
				c.readFailed(l, s, err, false)
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
		h, err := c.cfg.Agent.CreateXferReq(nixl.Read, local, remote, set.agents[s], opts)
		if err == nil {
			l.xfers = append(l.xfers, &xfer{h: h, rank: s, bytes: bytes, descs: descs, scatter: plan.Scatter, scatterBlocks: blocks})
			var st nixl.Status
			st, err = c.cfg.Agent.PostXferReq(h, nil)
			x := l.xfers[len(l.xfers)-1]
			x.start = time.Now()
			if err == nil && st == nixl.StatusSuccess {
				x.done = true
				c.stats.RecordTransfer(x.bytes, x.descs, 0)
			}
		}
		if err != nil {
			c.readFailed(l, s, err, false)
			return
		}
		if !l.r.pins() {
			notified = append(notified, s)
			// The READ carries the completion: once posted, prefill may
			// count it whatever becomes of the load.
			c.markNotified(l)
		}
	}
	c.stats.RecordPost(time.Since(start))
	for _, s := range set.notify {
		if !slices.Contains(notified, s) {
			l.after = append(l.after, s)
		}
	}
	l.deadline = c.cfg.Clock.Now().Add(c.cfg.TransferTimeout)
	if l.await != nil {
		c.askReady(l)
	}
	if l.r.pins() && len(l.xfers) > 0 {
		// Pinned while the READs run: the pin travels beside them, so it
		// adds to the critical path only what outlasts the READs.
		c.toPin = append(c.toPin, l)
	}
	if l.allDone() {
		c.succeed(l)
		return
	}
	c.reading = append(c.reading, l)
}

func (l *load) allDone() bool {
	for _, x := range l.xfers {
		if !x.done {
			return false
		}
	}
	return true
}

// succeed ends a load whose READs all ended: done (finish) once they are
// certain to have read the request's bytes, after the pin when prefill
// pins. wmu is held.
func (c *Consumer) succeed(l *load) {
	if hold, guarded := c.holdDeadline(l); guarded && len(l.xfers) > 0 {
		// The READ finished, but only bytes read while prefill still held
		// the blocks are the request's: done only if that is certain now.
		if now := c.cfg.Clock.Now(); !now.Before(hold) {
			c.expired(l, now, hold, "before its READ was seen complete")
			return
		}
	}
	if l.r.pins() && len(l.xfers) > 0 {
		l.readsEnded = time.Now()
		if l.pin == pinPending {
			// Done only once prefill pinned the hold for this engine;
			// the answer is still on its way.
			c.awaitingPin[l] = struct{}{}
			return
		}
		c.pinnedReadEnded(l)
		return
	}
	c.finish(l)
}

// finish ends a load whose READs ended and are trusted: the scatter out of
// the staging slot, then the completions no READ carried, then done. wmu
// is held.
func (c *Consumer) finish(l *load) {
	c.releaseXfers(l)
	c.markNotified(l)
	if err := c.scatter(l); err != nil {
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
			if err := c.cfg.Agent.GenNotif(l.r.setup.agents[s], msg, nil); err != nil {
				// The data is here; prefill frees by lease instead.
				c.stats.FailedNotifications.Inc()
				c.log.Warn("pullconn: completion not sent", zap.String("request_id", l.id), zap.Int("prefill_rank", s), zap.Error(err))
			}
		}
	}
	c.end(l, connector.Result{RequestID: l.id})
}

// pollReads checks every READ in flight once. wmu is held.
func (c *Consumer) pollReads() {
	if len(c.reading) == 0 {
		return
	}
	now := c.cfg.Clock.Now()
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
func (c *Consumer) pollLoad(l *load, now time.Time) bool {
	for _, x := range l.xfers {
		if l.postErr != nil {
			c.fail(l, l.postErr)
			return false
		}
		if x.done || x.pending {
			continue
		}
		st, err := c.cfg.Agent.XferStatus(x.h)
		if err != nil {
			c.readFailed(l, x.rank, err, true)
			return false
		}
		if st == nixl.StatusSuccess {
			x.done = true
			if !x.part {
				c.stats.RecordTransfer(x.bytes, x.descs, time.Since(x.start))
			}
			if x.scatterBlocks != nil && !l.allDone() {
				// Pipelined: this chunk is scattered while the later ones
				// are still read. The load still holds its blocks.
				if err := c.scatterOne(l, x); err != nil {
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
	if hold, guarded := c.holdDeadline(l); guarded && !now.Before(hold) && hold.Before(l.deadline) {
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

// heartbeat sends "HB:" with the remote request ids of every request still
// waiting on each ready engine, to the prefill ranks this rank notifies.
// It reports whether there was anything to send. wmu is held.
func (c *Consumer) heartbeat() bool {
	ids := map[*remote][]string{}
	for _, set := range [][]*load{c.reading, c.ready} {
		for _, l := range set {
			if !l.ended && l.r.ready {
				ids[l.r] = append(ids[l.r], l.p.RemoteRequestID)
			}
		}
	}
	c.qmu.Lock()
	for _, w := range c.waiting {
		p := &w.p
		if r, ok := c.remotes[p.RemoteEngineID+"@"+joinHostPort(p.RemoteHost, p.RemotePort)]; ok && r.ready {
			ids[r] = append(ids[r], p.RemoteRequestID)
		}
	}
	c.qmu.Unlock()
	if len(ids) == 0 {
		return false
	}
	for r, list := range ids {
		c.startHoldQuery(r, list)
		msgs, bad := notif.SplitHeartbeats(list, maxHeartbeatLen)
		for _, err := range bad {
			c.log.Debug("pullconn: id cannot go in a heartbeat", zap.Error(err))
		}
		for _, s := range r.setup.notify {
			for _, m := range msgs {
				if err := c.cfg.Agent.GenNotif(r.setup.agents[s], m, nil); err != nil {
					c.stats.FailedNotifications.Inc()
					c.log.Debug("pullconn: heartbeat not sent", zap.String("remote_engine_id", r.engineID), zap.Int("prefill_rank", s), zap.Error(err))
				}
			}
		}
	}
	return true
}

// holdDeadline returns, on this rank's clock, the last moment at which the
// load's prefill holds are certain to cover its READ: the later of the
// deadline its Params gave (converted with the handshake's clock offset,
// less its uncertainty) and the one a hold query confirmed, less
// Config.ExpiryMargin. guarded is false when prefill gave no deadline.
// wmu is held; the handshake must be done.
func (c *Consumer) holdDeadline(l *load) (deadline time.Time, guarded bool) {
	base, ok := l.p.expiry()
	if !ok || l.r == nil || l.r.setup == nil {
		return time.Time{}, false
	}
	deadline = base.Add(-l.r.clock.Offset - l.r.clock.Uncertainty)
	if t, ok := c.confirmed[l.key+"\x00"+l.p.RemoteRequestID]; ok && t.After(deadline) {
		deadline = t
	}
	return deadline.Add(-c.cfg.ExpiryMargin), true
}

// expired fails a load whose prefill hold no longer certainly covers its
// READ.
func (c *Consumer) expired(l *load, now, hold time.Time, when string) {
	c.stats.ExpiredRequests.Inc()
	c.fail(l, fmt.Errorf("%w: request %q: prefill engine %q holds its blocks until %v on this clock (margin and clock offset deducted), and it is %v, %s",
		ErrExpired, l.id, l.p.RemoteEngineID, hold.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), when))
}

// holdAnswer is a hold query's outcome.
type holdAnswer struct {
	r         *remote
	ids       []string
	deadlines []time.Time
	clock     handshake.Clock
	err       error
}

// queryHolds asks the prefill engine to extend and confirm its holds of
// ids. A heartbeat notification extends them too, but only this answer
// tells decode that it did: a heartbeat can be lost. It runs on its own
// goroutine.
func (c *Consumer) queryHolds(r *remote, ids []string) {
	defer c.hsWG.Done()
	ans := holdAnswer{r: r}
	for len(ids) > 0 && ans.err == nil {
		n := min(len(ids), handshake.MaxExtendIDs)
		ds, clk, err := c.e.core.Client().Extend(c.ctx, r.engineID, r.addr, c.cfg.Agent.Name(), ids[:n])
		ans.ids, ans.deadlines, ans.err = append(ans.ids, ids[:n]...), append(ans.deadlines, ds...), err
		if err == nil {
			ans.clock = clk
		}
		ids = ids[n:]
	}
	c.qmu.Lock()
	c.queried = append(c.queried, ans)
	c.qmu.Unlock()
	c.poll.Wake()
}

// applyHoldAnswer records the deadlines a hold query confirmed. wmu is
// held.
func (c *Consumer) applyHoldAnswer(a holdAnswer) {
	a.r.querying = false
	if a.err != nil {
		c.failedQueries.Inc()
		c.log.Debug("pullconn: hold query failed", zap.String("remote_engine_id", a.r.engineID), zap.Error(a.err))
		return
	}
	c.holdQueries.Inc()
	a.r.clock = a.clock
	want := c.expected()
	for i, id := range a.ids {
		k := a.r.key + "\x00" + id
		d := a.deadlines[i]
		if !want[k] || d.IsZero() {
			continue // not ours any more, or not held: the deadline stays
		}
		if t, ok := c.confirmed[k]; !ok || d.After(t) {
			c.confirmed[k] = d
		}
	}
}

// expected returns the remote keys and request ids ("<key>\x00<id>") that
// this rank's live loads and Waits read. wmu is held.
func (c *Consumer) expected() map[string]bool {
	want := map[string]bool{}
	for _, set := range [][]*load{c.reading, c.ready} {
		for _, l := range set {
			if !l.ended {
				want[l.key+"\x00"+l.p.RemoteRequestID] = true
			}
		}
	}
	for _, r := range c.remotes {
		for _, l := range r.parked {
			want[l.key+"\x00"+l.p.RemoteRequestID] = true
		}
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	for _, w := range c.waiting {
		want[w.p.RemoteEngineID+"@"+joinHostPort(w.p.RemoteHost, w.p.RemotePort)+"\x00"+w.p.RemoteRequestID] = true
	}
	return want
}

// pruneConfirmed forgets confirmed deadlines of requests this rank no
// longer reads (a KeepAlive that timed out or was aborted). wmu is held.
func (c *Consumer) pruneConfirmed() {
	want := c.expected()
	for k := range c.confirmed {
		if !want[k] {
			delete(c.confirmed, k)
		}
	}
}

// startHoldQuery starts a hold query for ids at r unless one is in flight
// or the engine speaks vLLM's protocol, which has none. wmu is held.
func (c *Consumer) startHoldQuery(r *remote, ids []string) {
	if r.querying || c.e.core.VLLM() {
		return
	}
	if !c.startExchange() {
		return
	}
	r.querying = true
	go c.queryHolds(r, slices.Clone(ids))
}

// markNotified records that a completion of the load may have reached
// prefill, which may then free the blocks: the remote request must not be
// loaded again by this rank until its hold's deadline. wmu is held.
func (c *Consumer) markNotified(l *load) {
	if l.completed {
		return
	}
	l.completed = true
	l.readUntil = c.cfg.Clock.Now().Add(c.cfg.TransferTimeout + c.cfg.KeepAliveTimeout)
	if hold, guarded := c.holdDeadline(l); guarded {
		l.readUntil = hold.Add(c.cfg.ExpiryMargin)
	}
}

// readBlocks is stagedRead's answer when a staged READ cannot be planned
// for l (why says what stopped it): l reads prefill's blocks directly, as
// an unstaged load does.
func (c *Consumer) readBlocks(l *load, why error) (bool, staging.ReadPlan, *staging.BlockCopy) {
	c.log.Debug("pullconn: staged READ not possible; reading the blocks", zap.String("request_id", l.id), zap.Error(why))
	return false, staging.ReadPlan{}, nil
}

// completionN is the number a completion to a prefill engine of set carries:
// decode's TP size in gonixl's protocol (prefill works out how many
// completions that means), or, in vLLM's since its connector version 12,
// the completions each prefill rank gets, max(1, decode TP / prefill TP).
func (c *Consumer) completionN(set *pairing) int {
	if c.e.core.VLLM() {
		return vllm.CompletionCount(c.cfg.Layout.TPSize, set.payload.TPSize)
	}
	return c.cfg.Layout.TPSize
}

// startExchange counts a side-channel goroutine (handshake, hold query,
// pin, readiness query) that Close waits for, unless the consumer is
// closed: then it reports false and the caller starts nothing.
func (c *Consumer) startExchange() bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.closed {
		return false
	}
	c.hsWG.Add(1)
	return true
}
