package pushconn

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/pushconn/internal/match"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// writeCore is a prefill rank's push protocol as a state machine, in the
// way etcd raft keeps its Node apart from storage and transport: it is fed
// events (a registration, a cancel, a heartbeat, and each round the
// handshakes that ended, the requests that finished or were aborted, a
// poll of the WRITEs in flight and the deadlines), and it acts only
// through its edge (writeEdge: notify a decode agent, post a WRITE, ask
// the agent about one, start a handshake, free a request's blocks, read
// the rank's clocks). It runs no goroutine, takes no lock and reads no
// clock but its edge's; the Producer's poller goroutine feeds it
// (writer.go), and the deterministic simulation (sim_test.go) feeds this
// same code from its events.
type writeCore struct {
	cfg      writeConfig
	edge     writeEdge
	log      *zap.Logger
	stats    *stats.Set
	push     *pushCounters
	matcher  *match.Matcher[*pendingReg, *hold]
	holds    map[string]*hold
	peers    decodePeers
	inflight []*write
	// progressing are the holds of requests that reported progress and
	// have not finished (writeprogress.go), by id.
	progressing map[string]*hold
	reports     uint64 // the holds that reported progress so far (hold.reported)
	mem         regMemory
	out         notices
	// legacy restores rules this revision replaced; only the simulation
	// sets it, to show that it finds the holes they left (sim_test.go).
	legacy struct {
		plainCompletions bool // completions name no registration seq (before 61c7e0a)
	}
}

func newWriteCore(cfg writeConfig, edge writeEdge, log *zap.Logger, st *stats.Set, push *pushCounters) (*writeCore, error) {
	m, err := match.New[*pendingReg, *hold](match.Config{RegistrationTTL: cfg.registrationTimeout, FinishedTTL: cfg.lease})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errInvalid, err)
	}
	c := &writeCore{cfg: cfg, edge: edge, log: log, stats: st, push: push, matcher: m,
		holds: map[string]*hold{}, progressing: map[string]*hold{}, mem: newRegMemory(cfg.registrationTimeout, log, push),
		peers: decodePeers{edge: edge, log: log, push: push, byKey: map[string]*decodeEngine{}}}
	c.peers.inflight = &c.inflight
	c.out = notices{cfg: &c.cfg, edge: edge, mem: &c.mem, log: log, stats: st, push: push}
	return c, nil
}

// busy reports whether finished blocks wait for a registration or WRITEs
// are in flight (the poller keeps its fast period only then).
func (c *writeCore) busy() bool { return c.matcher.WaitingFinished() || len(c.inflight) > 0 }

// onRegistration handles a PUSH_REG from decode rank agent sender.
func (c *writeCore) onRegistration(sender string, msg []byte) {
	reg, err := pushwire.DecodeRegistration(msg)
	if err != nil {
		if errors.Is(err, pushwire.ErrTooLong) {
			c.push.oversized.Inc()
		}
		c.stats.MalformedNotifications.Inc()
		c.log.Warn("pushconn: dropped a malformed PUSH_REG", zap.String("sender", sender), zap.Error(err))
		return
	}
	c.push.regsReceived.Inc()
	if reg.RemoteEngineID != c.cfg.engineID {
		c.push.misdirected.Inc()
		c.log.Warn("pushconn: dropped a PUSH_REG for another engine", zap.String("sender", sender),
			zap.String("request", reg.RequestID), zap.String("for", reg.RemoteEngineID))
		return
	}
	now := c.edge.now().wall
	if c.mem.dropped(now, sender, reg) {
		return
	}
	if held := c.matcher.PendingRegistrations() + c.peers.parked; held >= c.cfg.maxPending {
		c.push.pendingLimit.Inc()
		c.out.fail(sender, reg, pushwire.FailOverloaded, fmt.Sprintf(
			"prefill rank holds %d registrations, its limit (Config.MaxPendingRegistrations)", held))
		return
	}
	addr := joinAddr(reg.DecodeHost, reg.DecodePort)
	key := reg.DecodeEngineID + "@" + addr
	de := c.peers.byKey[key]
	if de == nil {
		c.peers.dropStale(now, c.cfg.engineTTL)
		if len(c.peers.byKey) >= c.cfg.maxPeers && !c.peers.evictIdle() {
			c.push.peerLimit.Inc()
			c.out.fail(sender, reg, pushwire.FailOverloaded, fmt.Sprintf(
				"prefill rank already serves %d decode engines, its limit (Config.MaxPeers), and none is idle", len(c.peers.byKey)))
			return
		}
		de = &decodeEngine{key: key, engineID: reg.DecodeEngineID, addr: addr, tp: reg.DecodeTPSize}
		c.peers.byKey[key] = de
	}
	de.lastUsed = now
	if de.payload != nil {
		c.admit(de, parkedReg{sender: sender, reg: reg, received: now})
		return
	}
	c.peers.park(de, parkedReg{sender: sender, reg: reg, received: now})
	c.peers.handshake(de)
}

// tick is one round after the notifications: the handshakes that ended,
// the requests that finished or were aborted since the last round, then
// the WRITEs in flight, the dead agents' metadata and the deadlines.
func (c *writeCore) tick(shakes []shakeResult, finished []*hold, aborts []string) {
	for _, s := range shakes {
		c.handshakeDone(s)
	}
	for _, h := range finished {
		c.finish(h)
	}
	for _, id := range aborts {
		c.abort(id)
	}
	c.pollWrites()
	c.peers.unloadWhenIdle()
	c.expire()
}

// joinAddr is a decode engine's side-channel address as its registrations
// name it.
func joinAddr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// handshakeDone admits the registrations that waited for a decode engine,
// or reports the handshake's failure to their senders where it can.
func (c *writeCore) handshakeDone(s shakeResult) {
	de := c.peers.byKey[s.key]
	de.busy = false
	parked, rewrites := de.parked, de.rewrites
	de.parked, de.rewrites = nil, nil
	c.peers.parked -= len(parked)
	err := s.err
	if err == nil {
		err = c.peers.accept(de, s.payload, c.cfg.layout)
	}
	acks := de.acks
	de.acks = nil
	if err != nil {
		c.stats.FailedHandshakes.Inc()
		c.edge.forgetHandshake(de)
		c.log.Warn("pushconn: handshake with decode engine failed", zap.String("decode", de.engineID), zap.Error(err))
		for _, r := range parked {
			c.out.fail(r.sender, r.reg, pushwire.FailHandshake, err.Error())
		}
		for _, r := range rewrites {
			c.failWrite(r.reg, r.hold, pushwire.FailHandshake, err)
		}
		for _, a := range acks {
			c.out.ack(nil, a.to, a.c) // undeliverable but counted
		}
		return
	}
	c.peers.noteRestart(de)
	for _, a := range acks {
		c.out.ack(de, a.to, a.c)
	}
	for _, r := range parked {
		c.admit(de, r)
	}
	for _, r := range rewrites {
		if de.payload == nil { // a registration above found it stale: wait for the next one
			de.rewrites = append(de.rewrites, r)
			continue
		}
		// Retry only into the instance that registered: a decode rank
		// that restarted under the same name has given those blocks to
		// other requests. Without an incarnation that cannot be known, so
		// such a registration is dropped rather than retried.
		if !r.reg.sameInstance() {
			c.dropStale(r.reg, r.hold)
			continue
		}
		r.reg.rank = de.targets[r.reg.sender]
		c.startWrite(r.reg, r.hold)
	}
	c.push.handshakes.Inc()
}

// finish gives a finished request to the matcher and starts the WRITEs of
// the registrations already waiting for it.
func (c *writeCore) finish(h *hold) {
	h = progressWriter{c}.adopt(h)
	c.holds[h.id] = h
	key := match.Key{RequestID: h.id, TransferID: h.transferID}
	c.mem.lapsed.forget(key) // registrations pair with these blocks now
	ms, err := c.matcher.Finish(h.finished, key, h)
	if err != nil { // RequestFinished refuses held ids, so this is a bug
		c.log.Error("pushconn: matcher refused a finished request", zap.String("request", h.id), zap.Error(err))
		c.maybeRelease(h)
		return
	}
	if len(ms) == 0 && c.mem.cancelled.take(key, c.edge.now().wall) {
		// No live registration pairs with it and decode cancelled the
		// one that would have: nothing will be written.
		c.matcher.Cancel(h.id)
		c.maybeRelease(h)
		return
	}
	h.inMatcher = true
	for _, m := range ms {
		c.push.countMatch(m.Kind)
		if m.Last {
			h.inMatcher = false
		}
	}
	h.writes += len(ms)
	for _, m := range ms {
		c.startWrite(m.Reg, h)
	}
	c.maybeRelease(h)
}

// startWrite starts the WRITE of h for registration pr with its
// completion notification and, unless it ended at once, keeps it in
// flight. Every failure ends in a PUSH_FAIL to decode.
func (c *writeCore) startWrite(pr *pendingReg, h *hold) {
	if pr.partial != nil {
		// A progressive WRITE of it is in flight: the completion goes
		// only after its bytes landed (or it failed), so this starts then.
		pr.finalWaits, pr.finalHold = true, h
		return
	}
	if pr.progress != h {
		pr.progress, pr.partInto = nil, partUndecided
		pr.setMark(layerMark{})
	}
	if c.edge.aborted(h.id) {
		c.failWrite(pr, h, pushwire.FailAborted, errEngineAborted)
		return
	}
	if pr.peer.payload == nil { // forgotten since the match: handshake again
		c.retryAfterHandshake(pr, h)
		return
	}
	if !pr.sameInstance() {
		c.dropStale(pr, h)
		return
	}
	// The registration's seq rides along (when it had one), so decode
	// counts this completion only for this registration, never for a
	// later one of the same id that a late copy of it would reach.
	seq := pr.reg.Seq
	if c.legacy.plainCompletions {
		seq = 0
	}
	msg, err := notif.EncodeSeqCompletion(pr.reg.RequestID, c.cfg.world, seq)
	if err != nil {
		c.failWrite(pr, h, pushwire.FailLayout, err)
		return
	}
	r := c.edge.post(pr, h, msg)
	switch r.what {
	case postInFlight:
		c.inflight = append(c.inflight, r.wr)
	case postCancelling:
		c.peers.forgetIfGone(pr.peer, r.err)
		c.inflight = append(c.inflight, r.wr)
	case postCompleted:
		c.completeWrite(r.wr)
	case postRetry:
		c.peers.forgetIfGone(pr.peer, r.err)
		c.retryAfterHandshake(pr, h)
	case postFailed:
		c.peers.forgetIfGone(pr.peer, r.err)
		c.failWrite(pr, h, r.kind, r.err)
	case postNotify:
		if err := c.edge.notify(pr.sender, msg); err != nil {
			c.stats.FailedNotifications.Inc()
			c.failWrite(pr, h, pushwire.FailPost, fmt.Errorf("send completion: %w", err))
			return
		}
		c.endWrite(pr, h)
	}
}

// pollWrites checks every WRITE in flight once.
func (c *writeCore) pollWrites() {
	if len(c.inflight) == 0 {
		return
	}
	// Monotonic: no step of the configured clock ends a WRITE's time, nor
	// the wait for the agent to let go of one that failed, early.
	now := c.edge.now().mono
	still := c.inflight[:0]
	// Progressive WRITEs that ended are settled after the loop: settling
	// one may post the next (writeprogress.go), into c.inflight.
	type partEnd struct {
		wr  *write
		err error
	}
	var parts []partEnd
	for _, wr := range c.inflight {
		if wr.cancelling {
			if c.edge.release(wr) || !now.Before(wr.drainUntil) {
				if !now.Before(wr.drainUntil) {
					c.push.stuckWrites.Inc()
					c.log.Error("pushconn: the agent did not release a failed WRITE within the write timeout; reporting it failed anyway", zap.String("request", wr.hold.id))
				}
				c.edge.ended(wr)
				if wr.partial {
					parts = append(parts, partEnd{wr, wr.failErr})
					continue
				}
				c.failWrite(wr.reg, wr.hold, pushwire.FailTransfer, wr.failErr)
				c.out.ackEnded(wr)
				continue
			}
			still = append(still, wr)
			continue
		}
		done, failed := c.edge.poll(wr)
		switch {
		case failed != nil:
			c.peers.forgetIfGone(wr.reg.peer, failed)
		case done && wr.partial:
			c.edge.completed(wr)
			parts = append(parts, partEnd{wr, nil})
			continue
		case done:
			c.completeWrite(wr)
			c.out.ackEnded(wr)
			continue
		case !now.Before(wr.deadline):
			c.stats.FailedTransfers.Inc()
			failed = fmt.Errorf("WRITE still in flight after %v: cancelled", c.cfg.writeTimeout)
		default:
			still = append(still, wr)
			continue
		}
		if !c.edge.release(wr) {
			// Decode must not hear of the failure (and take its blocks
			// back), nor the hold be freed, while the WRITE may move bytes.
			wr.cancelling, wr.failErr, wr.drainUntil = true, failed, now.Add(c.cfg.writeTimeout)
			still = append(still, wr)
			continue
		}
		c.edge.ended(wr)
		if wr.partial {
			parts = append(parts, partEnd{wr, failed})
			continue
		}
		c.failWrite(wr.reg, wr.hold, pushwire.FailTransfer, failed)
		c.out.ackEnded(wr)
	}
	clear(c.inflight[len(still):])
	c.inflight = still
	for _, p := range parts {
		progressWriter{c}.partEnded(p.wr, p.err)
	}
}

// retryAfterHandshake parks a matched WRITE until a fresh handshake with
// its decode engine, once: a decode engine that restarted under the same
// name has new agents, and the first WRITE after that finds the old
// metadata gone.
func (c *writeCore) retryAfterHandshake(pr *pendingReg, h *hold) {
	if pr.retry {
		c.failWrite(pr, h, pushwire.FailHandshake, fmt.Errorf("decode engine %q is unreachable", pr.peer.engineID))
		return
	}
	pr.retry = true
	pr.peer.rewrites = append(pr.peer.rewrites, rewrite{reg: pr, hold: h})
	c.peers.handshake(pr.peer)
}

// dropStale drops a registration of a decode rank instance that has since
// restarted under the same name (decodePeers.stale) and ends its part in
// h, its matched request, when set.
func (c *writeCore) dropStale(pr *pendingReg, h *hold) {
	c.peers.stale(pr)
	if h != nil {
		c.endWrite(pr, h)
	}
}

func (c *writeCore) completeWrite(wr *write) {
	c.edge.completed(wr)
	c.endWrite(wr.reg, wr.hold)
}

// failWrite reports a WRITE that will not happen to decode and ends it.
func (c *writeCore) failWrite(pr *pendingReg, h *hold, kind pushwire.FailKind, err error) {
	c.log.Warn("pushconn: push failed", zap.String("request", h.id), zap.String("decode_request", pr.reg.RequestID),
		zap.String("step", string(kind)), zap.Error(err))
	c.out.fail(pr.sender, pr.reg, kind, err.Error())
	c.endWrite(pr, h)
}

// endWrite ends registration pr's part in request h: its WRITE is done,
// failed or will not happen.
func (c *writeCore) endWrite(pr *pendingReg, h *hold) {
	pr.peer.refs--
	h.writes--
	c.maybeRelease(h)
}

// maybeRelease frees a request's blocks once nothing can still use them.
func (c *writeCore) maybeRelease(h *hold) {
	if h.released || h.writes > 0 || h.inMatcher || h.progressive {
		return // a request still computing is the engine's until it finishes or aborts
	}
	h.released = true
	delete(c.holds, h.id)
	if c.progressing[h.id] == h {
		delete(c.progressing, h.id)
	}
	c.edge.free(h.id)
}

// expire ends registrations that waited too long (decode hears why) and
// releases finished blocks whose lease ran out.
func (c *writeCore) expire() {
	regs, fins := c.matcher.Expire(c.edge.now().wall)
	for _, r := range regs {
		if wr := r.Reg.partial; wr != nil {
			// Decode takes its blocks back at the PUSH_FAIL: not while a
			// progressive WRITE into them may still land.
			wr.after = func() { c.expired(r.Sender, r.Reg) }
			continue
		}
		c.expired(r.Sender, r.Reg)
	}
	for _, f := range fins {
		c.stats.ExpiredRequests.Inc()
		f.Fin.inMatcher = false
		c.mem.lapsed.add(f.Key)
		c.maybeRelease(f.Fin)
	}
}

// expired ends registration pr, which waited for its request past the
// registration timeout, and tells its sender.
func (c *writeCore) expired(sender string, pr *pendingReg) {
	pr.peer.refs--
	if pr.peer.payload != nil && !pr.sameInstance() {
		c.dropStale(pr, nil) // its PUSH_FAIL would reach the new instance
		return
	}
	c.push.unmatchedExp.Inc()
	c.out.fail(sender, pr.reg, pushwire.FailExpired,
		fmt.Sprintf("request did not finish on prefill within the registration timeout (%v)", c.cfg.registrationTimeout))
}

// abort withdraws the engine's hold on request id (Producer.Abort): it
// leaves the matcher, matched WRITEs that have not started are failed
// (PUSH_FAIL "aborted"), those in flight may end, and the blocks are freed
// once none is.
func (c *writeCore) abort(id string) {
	h := c.holds[id]
	if h == nil || h.released {
		return
	}
	if h.inMatcher {
		c.matcher.Cancel(h.id)
		h.inMatcher = false
		// A registration that arrives for it later is told at once.
		c.mem.lapsed.add(match.Key{RequestID: h.id, TransferID: h.transferID})
	}
	if h.progressive {
		// Aborted while it computed: no progressive WRITE starts any
		// more, and a registration that comes later is told at once.
		h.progressive = false
		delete(c.progressing, h.id)
		c.mem.lapsed.add(match.Key{RequestID: h.id, TransferID: h.transferID})
	}
	for _, r := range c.peers.takeRewrites(h) {
		c.failWrite(r.reg, r.hold, pushwire.FailAborted, errEngineAborted)
	}
	c.maybeRelease(h)
}

// onHeartbeat handles vLLM's "HB:<id>,<id>,..." from a decode rank: each
// finished request of this rank that still waits for its registration
// under one of those ids (exactly, as vLLM's prefill looks them up) keeps
// its blocks until at least now plus two thirds of the lease.
func (c *writeCore) onHeartbeat(sender string, msg []byte) {
	ids, err := notif.DecodeHeartbeat(msg)
	if err != nil {
		c.stats.MalformedNotifications.Inc()
		c.log.Debug("pushconn: dropped a malformed heartbeat", zap.String("sender", sender), zap.Error(err))
		return
	}
	if n := c.matcher.Extend(c.edge.now().wall.Add(heartbeatExtension(c.cfg.lease)), ids...); n > 0 {
		c.push.leaseExtended.Add(uint64(n))
	}
}

// shutdown ends everything after the poller stopped: WRITEs in flight are
// cancelled, waiting registrations told, every held request freed.
func (c *writeCore) shutdown() {
	const why = "prefill rank closed"
	for _, wr := range c.inflight {
		if wr.partial {
			c.edge.cancel(wr)
			wr.hold.writes--
			pr := wr.reg
			pr.partial = nil
			pr.peer.refs--
			if pr.finalWaits { // matched: out of the matcher, so told here
				pr.finalWaits = false
				c.out.fail(pr.sender, pr.reg, pushwire.FailClosed, why)
				pr.finalHold.writes--
			}
			if wr.after != nil {
				wr.after()
			}
			continue
		}
		c.edge.cancel(wr)
		c.stats.FailedTransfers.Inc()
		c.out.fail(wr.reg.sender, wr.reg.reg, pushwire.FailClosed, why)
		wr.hold.writes--
	}
	c.inflight = nil
	regs, fins := c.matcher.Flush()
	for _, r := range regs {
		c.out.fail(r.Sender, r.Reg.reg, pushwire.FailClosed, why)
	}
	for _, f := range fins {
		f.Fin.inMatcher = false
	}
	for _, de := range c.peers.byKey {
		for _, r := range de.parked {
			c.out.fail(r.sender, r.reg, pushwire.FailClosed, why)
		}
		for _, r := range de.rewrites {
			c.out.fail(r.reg.sender, r.reg.reg, pushwire.FailClosed, why)
			r.hold.writes--
		}
		de.parked, de.rewrites = nil, nil
	}
	for _, h := range c.holds {
		h.inMatcher, h.progressive = false, false
		c.maybeRelease(h)
	}
}
