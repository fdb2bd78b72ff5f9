package pushconn

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/match"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// hold is a finished request's blocks on a prefill rank, from
// RequestFinished until they are freed.
type hold struct {
	id         string
	transferID string
	blocks     []int
	// groups are a grouped request's lists (RequestFinishedGroups), one
	// per KV-cache group; blocks is then nil.
	groups    [][]int
	tokens    int
	finished  time.Time // when RequestFinished took it: the lease counts from here
	writes    int       // WRITEs started and not yet ended
	inMatcher bool      // still waiting for registrations
	released  bool
}

// pendingReg is a registration admitted into the matcher.
type pendingReg struct {
	reg    *pushwire.Registration
	sender string // the decode rank's agent
	peer   *decodeEngine
	rank   int  // the decode TP rank sender belongs to
	retry  bool // already retried after a fresh handshake
	// incarnation is the instance of the sender's rank this registration
	// was admitted for (its payload's Incarnation): a WRITE goes only into
	// that instance, never into one that restarted under the same name.
	incarnation uint64
	// metadata is that rank's agent metadata in the same payload: without
	// incarnations (vLLM's protocol) it is what tells a restarted instance
	// of the same agent name from the one that registered.
	metadata []byte
}

// decodeEngine is a decode engine as one prefill rank sees it.
type decodeEngine struct {
	key      string
	engineID string
	addr     string
	tp       int // its TP size, as its registrations say (vLLM's payload does not)
	payload  *handshake.Payload
	targets  map[string]int // decode agents this rank writes into -> their TP rank
	busy     bool           // handshake in flight
	parked   []parkedReg    // registrations waiting for the handshake
	rewrites []rewrite      // matched WRITEs waiting for a new handshake
	acks     []ackOrder     // PUSH_CANCEL_ACKs to send once the handshake is done
	refs     int            // its registrations admitted and not yet ended
	lastUsed time.Time      // its latest registration, to evict the least recently used
	// retired holds the incarnations of payloads this rank dropped (the
	// engine restarted or its agents left), newest last, so a late
	// registration from a dead instance is recognised without a handshake.
	retired []uint64
	// prev and prevTargets are the payload and targets that forget dropped,
	// kept until a fresh handshake succeeds, so that handshake can tell
	// whether the engine restarted (decoderestart.go).
	prev        *handshake.Payload
	prevTargets map[string]int
	// dead holds the names of agents of incarnations that the engine
	// replaced with agents of other names, newest last (at most
	// retiredCap): a registration from one is dropped without a handshake.
	dead []string
	// unload holds dead agents whose metadata waits for the WRITEs in
	// flight into them to end before it is unloaded.
	unload []string
}

// retiredCap bounds decodeEngine.retired: a few restarts of a TP 8 engine.
const retiredCap = 64

// ackOrder is a PUSH_CANCEL_ACK owed to decode agent to.
type ackOrder struct {
	to string
	c  *pushwire.Cancel
}

// rewrite is a matched WRITE whose decode engine's metadata went stale (it
// restarted): it is retried once after a fresh handshake.
type rewrite struct {
	reg  *pendingReg
	hold *hold
}

type parkedReg struct {
	sender   string
	reg      *pushwire.Registration
	received time.Time // its registration timeout counts from here
	// refetched: it waits for a handshake it caused because its
	// incarnation differed from the payload held; if the fresh payload
	// differs too, it comes from a dead instance.
	refetched bool
}

// write is one WRITE in flight.
type write struct {
	reg  *pendingReg
	hold *hold
	// handles are its transfer requests still held: one for a direct
	// WRITE, one per chunk not yet seen complete for a staged one.
	handles  []nixl.XferHandle
	posted   time.Time // wall clock, for the transfer time
	deadline time.Time // on the rank's monotonic clock (Producer.mono)
	bytes    uint64
	descs    int
	// acks are the PUSH_CANCELs of its registration that arrived while it
	// was in flight: each is answered when it ends.
	acks []*pushwire.Cancel
	// cancelling: the WRITE failed or timed out but the agent would not
	// release it yet, so it may still be moving bytes. Nothing is told or
	// freed until the agent lets go (or until drainUntil, counted).
	cancelling bool
	failErr    error
	drainUntil time.Time // on the rank's monotonic clock
	// slot is the prefill staging slot a staged WRITE reads, released
	// once the WRITE ended (nil for a direct WRITE).
	slot *staging.Slot
}

// writer is the Producer's state on its poller goroutine: the matcher,
// the held requests, the decode engines and the WRITEs in flight. Only the
// poller goroutine touches it (and Close, once the poller stopped).
type writer struct {
	p        *Producer
	matcher  *match.Matcher[*pendingReg, *hold]
	holds    map[string]*hold
	peers    map[string]*decodeEngine
	inflight []*write
	lapsed   *lapsed // finished requests whose lease ran out
	// cancelled: registrations decode cancelled before their request
	// finished, so that request is freed at once, without a WRITE.
	cancelled *cancelledRegs
	// seen: registrations received, so a late copy of one is dropped.
	seen *seenRegs
	// cancelledUnseen: registrations whose PUSH_CANCEL came before them
	// (the PUSH_REG delayed or duplicated by the network); decode handed
	// their blocks back at the ack, so they must never be admitted.
	cancelledUnseen *seenRegs
	// seqless: registrations without a registration_seq that the rank
	// ended without a WRITE (cancelled, failed), so a late copy of one is
	// dropped; a seq tells copies from new registrations, without one
	// only the block ids can.
	seqless *seqlessEnded
	parked  int                  // registrations parked over all peers
	scratch descriptors.Transfer // mapping lists, reused by startWrite
	planner staging.Planner
	// unloading: decode engines with dead agents whose metadata waits for
	// WRITEs in flight to end (decodeEngine.unload).
	unloading map[*decodeEngine]bool
}

// idle reports whether nothing of the rank's refers to de: no handshake in
// flight, no registration waiting for one, admitted or being written.
func (de *decodeEngine) idle() bool {
	return !de.busy && len(de.parked) == 0 && len(de.rewrites) == 0 && de.refs == 0
}

// park holds a registration until de's handshake is done.
func (w *writer) park(de *decodeEngine, r parkedReg) {
	de.parked = append(de.parked, r)
	w.parked++
}

// busy keeps the poller at its 1 ms period only while finished blocks wait
// for a registration or WRITEs are in flight.
func (w *writer) busy() bool { return w.matcher.WaitingFinished() || len(w.inflight) > 0 }

// tick runs after each round of notifications: handshakes that finished,
// requests that finished, WRITEs in flight, and deadlines.
func (w *writer) tick() {
	p := w.p
	p.mu.Lock()
	finished, shakes, aborts := p.finished, p.shakes, p.aborts
	p.finished, p.shakes, p.aborts = nil, nil, nil
	p.mu.Unlock()
	for _, s := range shakes {
		w.handshakeDone(s)
	}
	for _, h := range finished {
		w.finish(h)
	}
	for _, id := range aborts {
		w.abort(id)
	}
	w.pollWrites()
	w.unloadWhenIdle()
	w.expire(p.now())
}

// onRegistration handles a PUSH_REG from decode rank agent sender.
func (w *writer) onRegistration(sender string, msg []byte) {
	p := w.p
	reg, err := pushwire.DecodeRegistration(msg)
	if err != nil {
		if errors.Is(err, pushwire.ErrTooLong) {
			p.push.oversized.Inc()
		}
		p.stats.MalformedNotifications.Inc()
		p.log.Warn("pushconn: dropped a malformed PUSH_REG", zap.String("sender", sender), zap.Error(err))
		return
	}
	p.push.regsReceived.Inc()
	if reg.RemoteEngineID != p.engine.ID() {
		p.push.misdirected.Inc()
		p.log.Warn("pushconn: dropped a PUSH_REG for another engine", zap.String("sender", sender),
			zap.String("request", reg.RequestID), zap.String("for", reg.RemoteEngineID))
		return
	}
	if reg.Seq == 0 {
		switch w.seqless.copyOf(p.now(), sender, reg) {
		case copyOfEnded:
			// Decode was told it ends here (PUSH_CANCEL_ACK, PUSH_FAIL)
			// and took its blocks back; a WRITE would land in reused ones.
			p.push.seqlessCopies.Inc()
			p.log.Debug("pushconn: dropped a copy of a seq-less registration the rank ended without a WRITE", zap.String("sender", sender), zap.String("request", reg.RequestID))
			return
		case copyCancelledFirst:
			p.push.cancelledFirst.Inc()
			p.log.Debug("pushconn: dropped a seq-less registration cancelled before it arrived", zap.String("sender", sender), zap.String("request", reg.RequestID))
			return
		}
	}
	if reg.Seq != 0 && w.cancelledUnseen.has(p.now(), sender, reg.RequestID, reg.TransferID, 0, reg.Seq) {
		// Its cancel came first and was acknowledged: decode's blocks are
		// back with its engine.
		p.push.cancelledFirst.Inc()
		p.log.Debug("pushconn: dropped a registration cancelled before it arrived", zap.String("sender", sender), zap.String("request", reg.RequestID))
		return
	}
	if reg.Seq != 0 && w.seen.check(p.now(), sender, reg.RequestID, reg.TransferID, reg.DecodeIncarnation, reg.Seq, p.now().Add(p.cfg.RegistrationTimeout)) {
		// A copy of a registration already received: the original may be
		// over and its blocks back with decode's engine.
		p.push.duplicates.Inc()
		p.log.Debug("pushconn: dropped a copy of a registration already received", zap.String("sender", sender), zap.String("request", reg.RequestID))
		return
	}
	if held := w.matcher.PendingRegistrations() + w.parked; held >= p.cfg.MaxPendingRegistrations {
		p.push.pendingLimit.Inc()
		w.sendFail(sender, reg, pushwire.FailOverloaded, fmt.Sprintf(
			"prefill rank holds %d registrations, its limit (Config.MaxPendingRegistrations)", held))
		return
	}
	addr := p.engine.addr(reg.DecodeHost, reg.DecodePort)
	key := reg.DecodeEngineID + "@" + addr
	de := w.peers[key]
	if de == nil {
		w.forgetStalePeers(p.now())
		if len(w.peers) >= p.cfg.MaxPeers && !w.evictIdlePeer() {
			p.push.peerLimit.Inc()
			w.sendFail(sender, reg, pushwire.FailOverloaded, fmt.Sprintf(
				"prefill rank already serves %d decode engines, its limit (Config.MaxPeers), and none is idle", len(w.peers)))
			return
		}
		de = &decodeEngine{key: key, engineID: reg.DecodeEngineID, addr: addr, tp: reg.DecodeTPSize}
		w.peers[key] = de
	}
	de.lastUsed = p.now()
	if de.payload != nil {
		w.admit(de, parkedReg{sender: sender, reg: reg, received: p.now()})
		return
	}
	w.park(de, parkedReg{sender: sender, reg: reg, received: p.now()})
	w.handshake(de)
}

// evictIdlePeer forgets the least recently used decode engine that nothing
// refers to, with its cached handshake and its agents' metadata; it
// reports whether there was one. A later registration from it handshakes
// again.
func (w *writer) evictIdlePeer() bool {
	var victim *decodeEngine
	for _, de := range w.peers {
		if de.idle() && (victim == nil || de.lastUsed.Before(victim.lastUsed)) {
			victim = de
		}
	}
	if victim == nil {
		return false
	}
	w.forgetPeer(victim)
	w.p.push.evicted.Inc()
	return true
}

// forgetPeer drops decode engine de with its cached handshake and its
// agents' metadata; a later registration from it handshakes again.
func (w *writer) forgetPeer(de *decodeEngine) {
	delete(w.peers, de.key)
	delete(w.unloading, de)
	w.p.engine.core.Client().Forget(de.engineID, de.addr)
	for _, agent := range de.unload {
		if !w.writesInto(agent) {
			_ = w.p.cfg.Agent.InvalidateRemoteMD(agent)
		}
	}
	for agent := range de.targets {
		if !w.writesInto(agent) { // another entry may reach the same engine under another host spelling
			_ = w.p.cfg.Agent.InvalidateRemoteMD(agent) // loaded again by its next handshake
		}
	}
}

// forgetStalePeers forgets the decode engines that nothing of the rank
// refers to and that registered nothing for RankConfig.EngineTTL (vLLM's
// engine_ttl). It runs when a registration comes from an engine the rank
// does not know, as vLLM's does before a handshake.
func (w *writer) forgetStalePeers(now time.Time) {
	ttl := w.p.cfg.EngineTTL
	if ttl < 0 {
		return
	}
	for _, de := range w.peers {
		if de.idle() && now.Sub(de.lastUsed) > ttl {
			w.forgetPeer(de)
			w.p.push.forgotten.Inc()
		}
	}
}

// writesInto reports whether a decode engine entry of this rank still
// writes into agent.
func (w *writer) writesInto(agent string) bool {
	for _, de := range w.peers {
		if _, ok := de.targets[agent]; ok {
			return true
		}
	}
	return false
}

// handshake starts fetching a decode engine's payload in the background,
// unless a fetch is already in flight; the result comes back through
// handshakeDone on the writer goroutine.
func (w *writer) handshake(de *decodeEngine) {
	if de.busy {
		return
	}
	de.busy = true
	p := w.p
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		pl, err := p.engine.core.Client().Get(p.ctx, de.engineID, de.addr, de.tp)
		p.mu.Lock()
		p.shakes = append(p.shakes, shakeResult{key: de.key, payload: pl, err: err})
		p.mu.Unlock()
		p.poll.Wake()
	}()
}

// handshakeDone admits the registrations that waited for a decode engine,
// or reports the handshake's failure to their senders where it can.
func (w *writer) handshakeDone(s shakeResult) {
	p := w.p
	de := w.peers[s.key]
	de.busy = false
	parked, rewrites := de.parked, de.rewrites
	de.parked, de.rewrites = nil, nil
	w.parked -= len(parked)
	err := s.err
	if err == nil {
		err = w.acceptDecode(de, s.payload)
	}
	if err != nil {
		p.stats.FailedHandshakes.Inc()
		p.engine.core.Client().Forget(de.engineID, de.addr)
		p.log.Warn("pushconn: handshake with decode engine failed", zap.String("decode", de.engineID), zap.Error(err))
		for _, r := range parked {
			w.sendFail(r.sender, r.reg, pushwire.FailHandshake, err.Error())
		}
		for _, r := range rewrites {
			w.failWrite(r.reg, r.hold, pushwire.FailHandshake, err)
		}
		acks := de.acks
		de.acks = nil
		for _, a := range acks {
			w.sendAck(nil, a.to, a.c) // undeliverable but counted
		}
		return
	}
	w.noteRestart(de)
	acks := de.acks
	de.acks = nil
	for _, a := range acks {
		w.sendAck(de, a.to, a.c)
	}
	for _, r := range parked {
		w.admit(de, r)
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
		if !r.reg.sameInstance() || r.reg.incarnation == 0 {
			w.dropStale(r.reg, r.hold)
			continue
		}
		r.reg.rank = de.targets[r.reg.sender]
		w.startWrite(r.reg, r.hold)
	}
	p.push.handshakes.Inc()
}

// acceptDecode checks that this rank can write into the decode engine and
// loads the metadata of the decode ranks it writes into.
func (w *writer) acceptDecode(de *decodeEngine, pl *handshake.Payload) error {
	p := w.p
	if pl.PPSize != 1 {
		return fmt.Errorf("%w: decode engine %q has PP size %d: pipeline-parallel decode is not supported", connector.ErrIncompatible, de.engineID, pl.PPSize)
	}
	dst := &pl.Ranks[0].Layout
	if err := descriptors.Compatible(&p.cfg.Layout, dst); err != nil {
		return fmt.Errorf("%w: decode engine %q: %v", connector.ErrIncompatible, de.engineID, err)
	}
	ranks, err := descriptors.Targets(&p.cfg.Layout, dst)
	if err != nil {
		return fmt.Errorf("%w: decode engine %q: %v", connector.ErrIncompatible, de.engineID, err)
	}
	targets := make(map[string]int, len(ranks))
	for _, r := range ranks {
		name, err := loadPeerMD(p.cfg.Agent, pl.Ranks[r].Agent, pl.Ranks[r].Metadata)
		if err != nil {
			return fmt.Errorf("%w: decode engine %q rank %d: load agent metadata: %v", connector.ErrHandshake, de.engineID, r, err)
		}
		targets[name] = r
	}
	de.payload, de.targets = pl, targets
	return nil
}

// admit checks a registration against the decode engine's payload and
// gives it to the matcher; a match starts the WRITE.
func (w *writer) admit(de *decodeEngine, r parkedReg) {
	p := w.p
	sender, reg, received := r.sender, r.reg, r.received
	if de.payload == nil { // dropped meanwhile (see below): wait for the fresh one
		w.park(de, r)
		w.handshake(de)
		return
	}
	rank, ok := de.targets[sender]
	if !ok && w.strangerSender(de, r) {
		return
	}
	if ok {
		cur := de.payload.Ranks[rank].Incarnation
		if inc := reg.DecodeIncarnation; inc != 0 && cur != 0 && inc != cur {
			if r.refetched || slices.Contains(de.retired, inc) {
				// From an instance that is gone: its blocks are not
				// the new instance's, and a PUSH_FAIL would reach the
				// new instance, which may hold a request of that id.
				w.dropStale(&pendingReg{reg: reg, sender: sender, peer: de, incarnation: inc}, nil)
				return
			}
			// Either the rank restarted since the payload was fetched, or
			// this is a late registration from a dead instance: a fresh
			// handshake tells which.
			w.forget(de)
			r.refetched = true
			w.park(de, r)
			w.handshake(de)
			return
		}
	}
	var why string
	switch {
	case !ok:
		p.push.misdirected.Inc()
		why = fmt.Sprintf("prefill rank %d does not write into decode agent %q", p.cfg.Layout.WorldRank(), sender)
	case reg.RemoteTPSize != p.engine.TPSize():
		why = fmt.Sprintf("registration says prefill TP size %d, engine %q has %d", reg.RemoteTPSize, p.engine.ID(), p.engine.TPSize())
	case reg.RemotePPSize != p.engine.PPSize():
		why = fmt.Sprintf("registration says prefill PP size %d, engine %q has %d", reg.RemotePPSize, p.engine.ID(), p.engine.PPSize())
	case reg.DecodeTPSize != de.payload.TPSize:
		why = fmt.Sprintf("registration says decode TP size %d, its handshake says %d", reg.DecodeTPSize, de.payload.TPSize)
	case len(reg.LocalBlockIDs) != len(p.cfg.Layout.GroupList()):
		why = fmt.Sprintf("registration has %d KV-cache groups, the prefill layout %d", len(reg.LocalBlockIDs), len(p.cfg.Layout.GroupList()))
	}
	if why != "" {
		w.sendFail(sender, reg, pushwire.FailLayout, why)
		return
	}
	key := match.Key{RequestID: reg.RequestID, TransferID: reg.TransferID}
	pr := &pendingReg{reg: reg, sender: sender, peer: de, rank: rank, incarnation: de.payload.Ranks[rank].Incarnation, metadata: de.payload.Ranks[rank].Metadata}
	m, out, err := w.matcher.Register(received, sender, key, reg.Seq, len(de.targets), pr)
	if m.Superseded {
		// The same request id registered again by the same decode rank:
		// the earlier registration is over on decode (its result is out),
		// so it is neither written nor told anything.
		m.Replaced.peer.refs--
		p.push.superseded.Inc()
	}
	if out == match.Pending && w.lapsed.has(key) {
		// Nothing live pairs with it, and the request it names had its
		// blocks freed when their lease ran out: nothing will come, so
		// decode hears it now, not at its registration timeout.
		w.matcher.Withdraw(sender, key)
		p.push.afterLease.Inc()
		w.sendFail(sender, reg, pushwire.FailExpired,
			fmt.Sprintf("prefill freed the request's blocks when their lease (%v) ran out before this registration arrived", p.cfg.Lease))
		return
	}
	switch {
	case err != nil:
		w.sendFail(sender, reg, pushwire.FailLayout, err.Error())
	case out == match.Duplicate:
		p.push.duplicates.Inc()
	case out == match.Pending:
		de.refs++
	case out == match.Matched:
		de.refs++
		w.countMatch(m.Kind)
		h := m.Fin
		if m.Last {
			h.inMatcher = false
		}
		h.writes++
		w.startWrite(pr, h)
	}
}

// finish gives a finished request to the matcher and starts the WRITEs of
// the registrations already waiting for it.
func (w *writer) finish(h *hold) {
	p := w.p
	w.holds[h.id] = h
	key := match.Key{RequestID: h.id, TransferID: h.transferID}
	w.lapsed.forget(key) // registrations pair with these blocks now
	ms, err := w.matcher.Finish(h.finished, key, h)
	if err != nil { // RequestFinished refuses held ids, so this is a bug
		p.log.Error("pushconn: matcher refused a finished request", zap.String("request", h.id), zap.Error(err))
		w.maybeRelease(h)
		return
	}
	if len(ms) == 0 && w.cancelled.take(key, p.now()) {
		// No live registration pairs with it and decode cancelled the
		// one that would have: nothing will be written.
		w.matcher.Cancel(h.id)
		w.maybeRelease(h)
		return
	}
	h.inMatcher = true
	for _, m := range ms {
		w.countMatch(m.Kind)
		if m.Last {
			h.inMatcher = false
		}
	}
	h.writes += len(ms)
	for _, m := range ms {
		w.startWrite(m.Reg, h)
	}
	w.maybeRelease(h)
}

func (w *writer) countMatch(k match.Kind) {
	switch k {
	case match.ByExactID:
		w.p.push.matchedExact.Inc()
	case match.ByStrippedID:
		w.p.push.matchedStrip.Inc()
	case match.ByTransferID:
		w.p.push.matchedXferID.Inc()
	}
}

// startWrite maps the request's blocks onto decode's, posts the WRITE with
// the completion notification and, unless it completed at once, leaves it
// in flight. Every failure ends in a PUSH_FAIL to decode.
func (w *writer) startWrite(pr *pendingReg, h *hold) {
	p := w.p
	if p.isAborted(h.id) {
		w.failWrite(pr, h, pushwire.FailAborted, errors.New("the prefill engine aborted the request"))
		return
	}
	if pr.peer.payload == nil { // forgotten since the match: handshake again
		w.retryAfterHandshake(pr, h)
		return
	}
	if !pr.sameInstance() {
		w.dropStale(pr, h)
		return
	}
	// The registration's seq rides along (when it had one), so decode
	// counts this completion only for this registration, never for a
	// later one of the same id that a late copy of it would reach.
	msg, err := notif.EncodeSeqCompletion(pr.reg.RequestID, p.world, pr.reg.Seq)
	if err != nil {
		w.failWrite(pr, h, pushwire.FailLayout, err)
		return
	}
	dstBlocks := pr.reg.LocalBlockIDs[0]
	notifyOnly := func() { // nothing to write: only say so
		if err := p.cfg.Agent.GenNotif(pr.sender, msg, nil); err != nil {
			p.stats.FailedNotifications.Inc()
			w.failWrite(pr, h, pushwire.FailPost, fmt.Errorf("send completion: %w", err))
			return
		}
		w.endWrite(pr, h)
	}
	if h.groups == nil && len(dstBlocks) == 0 { // decode holds everything
		notifyOnly()
		return
	}
	dst := &pr.peer.payload.Ranks[pr.rank].Layout
	start := time.Now()
	if h.groups != nil {
		// A grouped request: mapped group by group, and staged through
		// decode's group image when it offered a slot (stageGroups).
		if err := w.mapGroups(&w.scratch, pr, h, dst); err != nil {
			w.failWrite(pr, h, pushwire.FailLayout, fmt.Errorf("map prefill blocks onto decode rank %d: %w", pr.rank, err))
			return
		}
		if w.scratch.Len() == 0 { // decode holds everything this rank has
			notifyOnly()
			return
		}
		w.post(pr, h, msg, &w.scratch, w.stageGroups(pr, h, &w.scratch, dst), start)
		return
	}
	cached, err := dstCached(len(h.blocks), len(dstBlocks), p.cfg.Layout.BlockSize, dst.BlockSize, h.tokens)
	// The lists are reused from WRITE to WRITE (only the poller goroutine
	// runs the writer): agents copy them in CreateXferReq, and a fragmented
	// request would otherwise allocate megabytes each time.
	t := &w.scratch
	var sw *stagedWrite
	if err == nil {
		// Whole blocks one to one: staging needs no mapping and the model
		// only the runs (mapping a fragmented request is the largest CPU
		// cost before its first byte moves). Otherwise the mapped WRITE
		// is the direct one and the staged plan's input.
		same := p.pool != nil && pr.reg.Staging != nil && staging.SameBlocks(&p.cfg.Layout, dst) && len(h.blocks)-cached == len(dstBlocks)
		if same {
			bytes := uint64(len(dstBlocks)) * uint64(len(dst.Regions)) * dst.BlockLen()
			sw = w.stage(pr, h, nil, staging.SameBlocksDescs(dst, h.blocks[cached:], dstBlocks), bytes, dst, dstBlocks, cached)
		}
		if sw == nil {
			_, err = descriptors.MapCoalescedInto(t, &p.cfg.Layout, dst, descriptors.Request{SrcBlocks: h.blocks, DstBlocks: dstBlocks, DstCached: cached})
		}
		if err == nil && sw == nil && !same {
			sw = w.stage(pr, h, t, t.Len(), t.Bytes, dst, dstBlocks, cached)
		}
	}
	if err != nil {
		w.failWrite(pr, h, pushwire.FailLayout, fmt.Errorf("map prefill blocks onto decode rank %d: %w", pr.rank, err))
		return
	}
	w.post(pr, h, msg, t, sw, start)
}

// post posts a mapped WRITE t (or the staged one sw) with completion msg,
// unless the engine aborted the request meanwhile.
func (w *writer) post(pr *pendingReg, h *hold, msg []byte, t *descriptors.Transfer, sw *stagedWrite, start time.Time) {
	p := w.p
	// Abort waits for postMu: once it returned, no WRITE of the request
	// starts.
	p.postMu.Lock()
	defer p.postMu.Unlock()
	if p.isAborted(h.id) {
		if sw != nil {
			w.freeSlot(sw.slot)
		}
		w.failWrite(pr, h, pushwire.FailAborted, errors.New("the prefill engine aborted the request"))
		return
	}
	if sw != nil {
		w.postStaged(pr, h, sw, start)
		return
	}
	local, remote := t.Sides(nixl.Write)
	bytes, descs := t.Bytes, t.Len()
	xh, err := p.cfg.Agent.CreateXferReq(nixl.Write, local, remote, pr.sender, nixl.NotifOptions(msg))
	if err != nil && peerGone(err) && !pr.retry {
		w.forgetIfGone(pr.peer, err)
		w.retryAfterHandshake(pr, h)
		return
	}
	if err != nil {
		p.stats.FailedTransfers.Inc()
		w.forgetIfGone(pr.peer, err)
		w.failWrite(pr, h, pushwire.FailPost, fmt.Errorf("create WRITE: %w", err))
		return
	}
	status, err := p.cfg.Agent.PostXferReq(xh, nil)
	posted := time.Now()
	p.stats.RecordPost(posted.Sub(start))
	// The transfer time starts once the WRITE is posted, as pull's READ
	// time does: the same metric means the same thing on both connectors.
	wr := &write{reg: pr, hold: h, handles: []nixl.XferHandle{xh}, posted: posted, deadline: p.mono().Add(p.cfg.WriteTimeout), bytes: bytes, descs: descs}
	switch {
	case err != nil && peerGone(err) && !pr.retry:
		_ = p.cfg.Agent.ReleaseXferReq(xh)
		w.forgetIfGone(pr.peer, err)
		w.retryAfterHandshake(pr, h)
	case err != nil:
		_ = p.cfg.Agent.ReleaseXferReq(xh)
		p.stats.FailedTransfers.Inc()
		w.forgetIfGone(pr.peer, err)
		w.failWrite(pr, h, pushwire.FailPost, fmt.Errorf("post WRITE: %w", err))
	case status == nixl.StatusSuccess:
		w.completeWrite(wr)
	default:
		w.inflight = append(w.inflight, wr)
	}
}

// dstCached returns how many of the request's blocks decode already held
// (a prefix-cache hit), which are left out of its registration.
func dstCached(srcBlocks, dstBlocks, srcTokens, dstTokens, tokens int) (int, error) {
	var total int
	switch {
	case tokens > 0:
		total = (tokens + dstTokens - 1) / dstTokens
	case dstTokens >= srcTokens:
		// Exact: the request's last token lies in prefill's last block.
		total = (srcBlocks*srcTokens + dstTokens - 1) / dstTokens
	default:
		// Ambiguous without the token count: assume no prefix hit.
		total = dstBlocks
	}
	if dstBlocks > total {
		return 0, fmt.Errorf("%w: decode registered %d blocks of %d tokens, the request needs at most %d",
			descriptors.ErrInvalid, dstBlocks, dstTokens, total)
	}
	return total - dstBlocks, nil
}

// pollWrites checks every WRITE in flight once.
func (w *writer) pollWrites() {
	if len(w.inflight) == 0 {
		return
	}
	p := w.p
	// Monotonic: no step of the configured clock ends a WRITE's time, nor
	// the wait for the agent to let go of one that failed, early.
	now := p.mono()
	still := w.inflight[:0]
	for _, wr := range w.inflight {
		if wr.cancelling {
			if w.released(wr) || !now.Before(wr.drainUntil) {
				if !now.Before(wr.drainUntil) {
					p.push.stuckWrites.Inc()
					p.log.Error("pushconn: the agent did not release a failed WRITE within the write timeout; reporting it failed anyway", zap.String("request", wr.hold.id))
				}
				w.freeSlot(wr.slot)
				w.failWrite(wr.reg, wr.hold, pushwire.FailTransfer, wr.failErr)
				w.ackEnded(wr)
				continue
			}
			still = append(still, wr)
			continue
		}
		failed := w.pollHandles(wr)
		switch {
		case failed != nil:
		case len(wr.handles) == 0:
			w.completeWrite(wr)
			w.ackEnded(wr)
			continue
		case !now.Before(wr.deadline):
			p.stats.FailedTransfers.Inc()
			failed = fmt.Errorf("WRITE still in flight after %v: cancelled", p.cfg.WriteTimeout)
		default:
			still = append(still, wr)
			continue
		}
		if !w.released(wr) {
			// Decode must not hear of the failure (and take its blocks
			// back), nor the hold be freed, while the WRITE may move bytes.
			wr.cancelling, wr.failErr, wr.drainUntil = true, failed, now.Add(p.cfg.WriteTimeout)
			still = append(still, wr)
			continue
		}
		w.freeSlot(wr.slot)
		w.failWrite(wr.reg, wr.hold, pushwire.FailTransfer, failed)
		w.ackEnded(wr)
	}
	clear(w.inflight[len(still):])
	w.inflight = still
}

// pollHandles checks a WRITE's transfer requests once, releasing the ones
// that completed; it returns the error of one that failed.
func (w *writer) pollHandles(wr *write) error {
	p := w.p
	left := wr.handles[:0]
	var failed error
	for _, xh := range wr.handles {
		if failed != nil {
			left = append(left, xh)
			continue
		}
		status, err := p.cfg.Agent.XferStatus(xh)
		switch {
		case err != nil:
			p.stats.FailedTransfers.Inc()
			w.forgetIfGone(wr.reg.peer, err)
			failed = fmt.Errorf("WRITE failed in flight: %w", err)
			left = append(left, xh)
		case status == nixl.StatusSuccess:
			if err := p.cfg.Agent.ReleaseXferReq(xh); err != nil {
				p.log.Debug("pushconn: release of a completed WRITE failed", zap.Error(err))
			}
		default:
			left = append(left, xh)
		}
	}
	clear(wr.handles[len(left):])
	wr.handles = left
	return failed
}

// released asks the agent to let go of a WRITE's transfer requests and
// reports whether it did for all: then no byte of it moves any more. A
// handle the agent no longer knows counts as released.
func (w *writer) released(wr *write) bool {
	errs := make([]error, len(wr.handles))
	if err := nixl.ReleaseXferReqs(w.p.cfg.Agent, wr.handles, errs); err != nil {
		return false
	}
	left := wr.handles[:0]
	for i, xh := range wr.handles {
		err := errs[i]
		if !(err == nil || errors.Is(err, nixl.ErrInvalidParam) || errors.Is(err, nixl.ErrNotFound)) {
			left = append(left, xh)
		}
	}
	clear(wr.handles[len(left):])
	wr.handles = left
	return len(left) == 0
}

// retryAfterHandshake parks a matched WRITE until a fresh handshake with
// its decode engine, once: a decode engine that restarted under the same
// name has new agents, and the first WRITE after that finds the old
// metadata gone.
func (w *writer) retryAfterHandshake(pr *pendingReg, h *hold) {
	if pr.retry {
		w.failWrite(pr, h, pushwire.FailHandshake, fmt.Errorf("decode engine %q is unreachable", pr.peer.engineID))
		return
	}
	pr.retry = true
	pr.peer.rewrites = append(pr.peer.rewrites, rewrite{reg: pr, hold: h})
	w.handshake(pr.peer)
}

// forgetIfGone drops a decode engine's handshake when err says its agents
// are gone (it restarted or left), so its next registration handshakes
// again instead of using stale metadata.
func (w *writer) forgetIfGone(de *decodeEngine, err error) {
	if peerGone(err) {
		w.forget(de)
	}
}

// forget drops a decode engine's payload, here and in the engine's
// handshake cache, and retires its incarnations.
func (w *writer) forget(de *decodeEngine) {
	if de.payload == nil {
		return
	}
	for _, r := range de.payload.Ranks {
		if r.Incarnation != 0 && !slices.Contains(de.retired, r.Incarnation) {
			de.retired = append(de.retired, r.Incarnation)
		}
	}
	if n := len(de.retired) - retiredCap; n > 0 {
		de.retired = append(de.retired[:0], de.retired[n:]...)
	}
	if de.prev == nil { // the last payload a handshake confirmed
		de.prev, de.prevTargets = de.payload, de.targets
	}
	de.payload, de.targets = nil, nil
	w.p.engine.core.Client().Forget(de.engineID, de.addr)
}

// sameInstance reports whether the decode rank that sent the registration
// is still the instance it was admitted for, by the payload prefill holds
// now (which must be set).
func (pr *pendingReg) sameInstance() bool {
	de := pr.peer
	rank, ok := de.targets[pr.sender]
	if !ok {
		return false
	}
	cur := &de.payload.Ranks[rank]
	if cur.Incarnation != 0 || pr.incarnation != 0 {
		return cur.Incarnation == pr.incarnation
	}
	// No incarnations (vLLM's protocol): an agent that restarted under
	// the same name publishes other metadata (its new endpoints).
	return bytes.Equal(cur.Metadata, pr.metadata)
}

// dropStale drops a registration of a decode rank instance that has since
// restarted under the same name (h, when set, is its matched request):
// nothing is written, and no PUSH_FAIL is sent, because the instance that
// could use it is gone and the agent of that name is the new instance's.
func (w *writer) dropStale(pr *pendingReg, h *hold) {
	w.p.push.stale.Inc()
	w.p.log.Info("pushconn: dropped a registration from a decode instance that restarted",
		zap.String("decode", pr.peer.engineID), zap.String("sender", pr.sender),
		zap.String("decode_request", pr.reg.RequestID), zap.Uint64("incarnation", pr.incarnation))
	if h != nil {
		w.endWrite(pr, h)
	}
}

func (w *writer) completeWrite(wr *write) {
	p := w.p
	errs := make([]error, len(wr.handles))
	if err := nixl.ReleaseXferReqs(p.cfg.Agent, wr.handles, errs); err != nil {
		p.log.Debug("pushconn: release of a completed WRITE failed", zap.Error(err))
	}
	for _, err := range errs {
		if err != nil {
			p.log.Debug("pushconn: release of a completed WRITE failed", zap.Error(err))
		}
	}
	wr.handles = nil
	p.stats.RecordTransfer(wr.bytes, wr.descs, time.Since(wr.posted))
	if p.stage != nil {
		if wr.slot != nil {
			p.stage.Staged.Inc()
		} else {
			p.stage.Direct.Inc()
		}
	}
	w.freeSlot(wr.slot)
	w.endWrite(wr.reg, wr.hold)
}

// failWrite reports a WRITE that will not happen to decode and ends it.
func (w *writer) failWrite(pr *pendingReg, h *hold, kind pushwire.FailKind, err error) {
	w.p.log.Warn("pushconn: push failed", zap.String("request", h.id), zap.String("decode_request", pr.reg.RequestID),
		zap.String("step", string(kind)), zap.Error(err))
	w.sendFail(pr.sender, pr.reg, kind, err.Error())
	w.endWrite(pr, h)
}

// sendFail sends decode a PUSH_FAIL for its registration reg. Decode takes
// the blocks back on it, so a seq-less registration is remembered (even
// when the PUSH_FAIL cannot be delivered: decode's timeout then does the
// same) and a late copy of it is never admitted.
func (w *writer) sendFail(sender string, reg *pushwire.Registration, kind pushwire.FailKind, reason string) {
	p := w.p
	if reg.Seq == 0 {
		w.seqless.ended(sender, reg, p.now().Add(p.cfg.RegistrationTimeout))
	}
	if p.engine.vllm() {
		// vLLM's protocol has no PUSH_FAIL: decode sees the failure at its
		// registration timeout (and keeps its blocks until no WRITE of
		// this rank can land, which none will now).
		p.push.failWithheld.Inc()
		p.log.Debug("pushconn: a registration failed; vLLM's protocol has no PUSH_FAIL to tell decode",
			zap.String("decode_request", reg.RequestID), zap.String("to", sender), zap.String("kind", string(kind)), zap.String("reason", reason))
		return
	}
	msg, err := pushwire.EncodeFailure(&pushwire.Failure{
		RequestID: reg.RequestID, TransferID: reg.TransferID, EngineID: p.engine.ID(),
		Rank: p.cfg.Layout.WorldRank(), Kind: kind, Reason: reason, Seq: reg.Seq,
	})
	if err == nil {
		err = p.cfg.Agent.GenNotif(sender, msg, nil)
	}
	if err != nil {
		p.push.failUndeliver.Inc()
		p.stats.FailedNotifications.Inc()
		p.log.Warn("pushconn: could not send PUSH_FAIL", zap.String("decode_request", reg.RequestID), zap.String("to", sender), zap.Error(err))
		return
	}
	p.push.failSent.Inc()
}

// endWrite ends registration pr's part in request h: its WRITE is done,
// failed or will not happen.
func (w *writer) endWrite(pr *pendingReg, h *hold) {
	pr.peer.refs--
	h.writes--
	w.maybeRelease(h)
}

// maybeRelease frees a request's blocks once nothing can still use them.
func (w *writer) maybeRelease(h *hold) {
	if h.released || h.writes > 0 || h.inMatcher {
		return
	}
	h.released = true
	delete(w.holds, h.id)
	w.p.free(h.id)
}

// expire ends registrations that waited too long (decode hears why) and
// releases finished blocks whose lease ran out.
func (w *writer) expire(now time.Time) {
	regs, fins := w.matcher.Expire(now)
	for _, r := range regs {
		r.Reg.peer.refs--
		if r.Reg.peer.payload != nil && !r.Reg.sameInstance() {
			w.dropStale(r.Reg, nil) // its PUSH_FAIL would reach the new instance
			continue
		}
		w.p.push.unmatchedExp.Inc()
		w.sendFail(r.Sender, r.Reg.reg, pushwire.FailExpired,
			fmt.Sprintf("request did not finish on prefill within the registration timeout (%v)", w.p.cfg.RegistrationTimeout))
	}
	for _, f := range fins {
		w.p.stats.ExpiredRequests.Inc()
		f.Fin.inMatcher = false
		w.lapsed.add(f.Key)
		w.maybeRelease(f.Fin)
	}
}

// onCancel handles decode's PUSH_CANCEL: the request ended on decode, whose
// engine reuses the blocks once this rank has acknowledged, so this rank
// must not write them. A registration still waiting for its request
// leaves the matcher and is remembered (its request is then freed without
// a WRITE when it finishes and no live registration pairs with it); one
// waiting for a handshake or for a retry is dropped; all three are
// acknowledged at once (PUSH_CANCEL_ACK; after the handshake for one that
// waited for it). A WRITE in flight cannot be called back: it is
// acknowledged when it ends (completed, failed, or cancelled at the write
// timeout). A cancel for a registration the rank does not hold (written,
// failed, or never received) is acknowledged at once too.
func (w *writer) onCancel(sender string, msg []byte) {
	p := w.p
	c, err := pushwire.DecodeCancel(msg)
	if err != nil {
		if errors.Is(err, pushwire.ErrTooLong) {
			p.push.oversized.Inc()
		}
		p.stats.MalformedNotifications.Inc()
		p.log.Warn("pushconn: dropped a malformed PUSH_CANCEL", zap.String("sender", sender), zap.Error(err))
		return
	}
	p.push.cancelReceived.Inc()
	switch de, reg, st := w.cancel(sender, c); st {
	case cancelDropped:
		p.push.cancelDropped.Inc()
		if reg.Seq == 0 {
			// Decode takes the blocks back at the ack: a copy of it
			// must not be admitted after.
			w.seqless.ended(sender, reg, p.now().Add(p.cfg.RegistrationTimeout))
		}
		w.sendAck(de, sender, c)
	case cancelInFlight:
		// Answered when the WRITE ends.
	default:
		p.log.Debug("pushconn: PUSH_CANCEL for no waiting registration (written, failed or never received)",
			zap.String("sender", sender), zap.String("decode_request", c.RequestID))
		if c.Seq != 0 {
			// Never received, perhaps: the registration may still be on
			// its way, and decode reuses the blocks once this ack is in.
			// (The cancel carries no incarnation; the seq starts at random
			// for every decode start, so another instance's registration
			// is not caught by it but for a 2^-64 chance, which would only
			// make that one time out.)
			w.cancelledUnseen.check(p.now(), sender, c.RequestID, c.TransferID, 0, c.Seq, p.now().Add(p.cfg.RegistrationTimeout))
		} else {
			// The same for a seq-less registration; the cancel names no
			// blocks, so any seq-less registration of these ids from
			// the sender is refused until the timeout.
			w.seqless.cancelledUnseen(sender, c.RequestID, c.TransferID, p.now().Add(p.cfg.RegistrationTimeout))
		}
		w.sendAck(w.peerOf(sender), sender, c)
	}
}

// cancelState is what a PUSH_CANCEL found.
type cancelState int

const (
	cancelNone     cancelState = iota // no registration of it held
	cancelDropped                     // dropped before its WRITE started
	cancelInFlight                    // its WRITE is in flight
)

// cancel drops sender's registration named by c and reports what it found,
// with the decode engine entry it belongs to and, when it dropped one, the
// registration.
func (w *writer) cancel(sender string, c *pushwire.Cancel) (*decodeEngine, *pushwire.Registration, cancelState) {
	// A cancel that names its registration's seq cancels only that one: an
	// earlier registration's cancel, late or repeated, must not withdraw
	// (or answer for) a newer registration of the same id.
	same := func(reg *pushwire.Registration) bool {
		return reg.RequestID == c.RequestID && reg.TransferID == c.TransferID && (c.Seq == 0 || reg.Seq == c.Seq)
	}
	key := match.Key{RequestID: c.RequestID, TransferID: c.TransferID}
	if pr, ok := w.matcher.Pending(sender, key); ok && same(pr.reg) {
		w.matcher.Withdraw(sender, key)
		// Out of the matcher, so it takes no match from a retry's live
		// registration; remembered, so its request is freed at once.
		pr.peer.refs--
		w.cancelled.add(key, w.p.now().Add(w.p.cfg.RegistrationTimeout))
		return pr.peer, pr.reg, cancelDropped
	}
	for _, wr := range w.inflight {
		if wr.reg.sender == sender && same(wr.reg.reg) {
			wr.acks = append(wr.acks, c)
			return wr.reg.peer, nil, cancelInFlight
		}
	}
	for _, de := range w.peers {
		for i, r := range de.parked {
			if r.sender == sender && same(r.reg) {
				de.parked = append(de.parked[:i], de.parked[i+1:]...)
				w.parked--
				return de, r.reg, cancelDropped
			}
		}
		for i, r := range de.rewrites {
			if r.reg.sender == sender && same(r.reg.reg) {
				de.rewrites = append(de.rewrites[:i], de.rewrites[i+1:]...)
				w.endWrite(r.reg, r.hold)
				return de, r.reg.reg, cancelDropped
			}
		}
	}
	return nil, nil, cancelNone
}

// peerOf returns the decode engine entry that writes into agent, if any.
func (w *writer) peerOf(agent string) *decodeEngine {
	for _, de := range w.peers {
		if _, ok := de.targets[agent]; ok {
			return de
		}
	}
	return nil
}

// ackEnded answers the PUSH_CANCELs that arrived while wr was in flight:
// it has ended, so nothing of it can land any more.
func (w *writer) ackEnded(wr *write) {
	for _, c := range wr.acks {
		w.sendAck(wr.reg.peer, wr.reg.sender, c)
	}
	wr.acks = nil
}

// sendAck sends decode agent to a PUSH_CANCEL_ACK for c. When the agent
// cannot be reached yet because de's handshake is in flight, the ack waits
// for the handshake.
func (w *writer) sendAck(de *decodeEngine, to string, c *pushwire.Cancel) {
	p := w.p
	msg, err := pushwire.EncodeCancelAck(&pushwire.CancelAck{
		RequestID: c.RequestID, TransferID: c.TransferID, EngineID: p.engine.ID(), Rank: p.cfg.Layout.WorldRank(), Seq: c.Seq,
	})
	if err == nil {
		err = p.cfg.Agent.GenNotif(to, msg, nil)
	}
	if err != nil {
		if de != nil && de.busy && errors.Is(err, nixl.ErrNotFound) {
			de.acks = append(de.acks, ackOrder{to: to, c: c})
			return
		}
		p.push.cancelAckUndeliver.Inc()
		p.stats.FailedNotifications.Inc()
		p.log.Debug("pushconn: could not send PUSH_CANCEL_ACK", zap.String("decode_request", c.RequestID), zap.String("to", to), zap.Error(err))
		return
	}
	p.push.cancelAckSent.Inc()
}

// abort withdraws the engine's hold on request id (Producer.Abort): it
// leaves the matcher, matched WRITEs that have not started are failed
// (PUSH_FAIL "aborted"), those in flight may end, and the blocks are freed
// once none is.
func (w *writer) abort(id string) {
	h := w.holds[id]
	if h == nil || h.released {
		return
	}
	if h.inMatcher {
		w.matcher.Cancel(h.id)
		h.inMatcher = false
		// A registration that arrives for it later is told at once.
		w.lapsed.add(match.Key{RequestID: h.id, TransferID: h.transferID})
	}
	for _, de := range w.peers {
		kept := de.rewrites[:0]
		var failed []rewrite
		for _, r := range de.rewrites {
			if r.hold == h {
				failed = append(failed, r)
			} else {
				kept = append(kept, r)
			}
		}
		de.rewrites = kept
		for _, r := range failed {
			w.failWrite(r.reg, r.hold, pushwire.FailAborted, errors.New("the prefill engine aborted the request"))
		}
	}
	w.maybeRelease(h)
}

// onStray counts notifications a prefill rank never expects.
func (w *writer) onStray(sender string, msg []byte) {
	w.p.stats.UnknownNotifications.Inc()
	w.p.log.Debug("pushconn: dropped a notification prefill does not expect", zap.String("sender", sender), zap.Int("bytes", len(msg)))
}

// shutdown ends everything after the poller stopped: WRITEs in flight are
// cancelled, waiting registrations told, every held request freed.
func (w *writer) shutdown() {
	const why = "prefill rank closed"
	for _, wr := range w.inflight {
		for _, xh := range wr.handles {
			_ = w.p.cfg.Agent.ReleaseXferReq(xh)
		}
		w.freeSlot(wr.slot)
		w.p.stats.FailedTransfers.Inc()
		w.sendFail(wr.reg.sender, wr.reg.reg, pushwire.FailClosed, why)
		wr.hold.writes--
	}
	w.inflight = nil
	regs, fins := w.matcher.Flush()
	for _, r := range regs {
		w.sendFail(r.Sender, r.Reg.reg, pushwire.FailClosed, why)
	}
	for _, f := range fins {
		f.Fin.inMatcher = false
	}
	for _, de := range w.peers {
		for _, r := range de.parked {
			w.sendFail(r.sender, r.reg, pushwire.FailClosed, why)
		}
		for _, r := range de.rewrites {
			w.sendFail(r.reg.sender, r.reg.reg, pushwire.FailClosed, why)
			r.hold.writes--
		}
		de.parked, de.rewrites = nil, nil
	}
	for _, h := range w.holds {
		h.inMatcher = false
		w.maybeRelease(h)
	}
}
