package pushconn

import (
	"fmt"
	"net"
	"strconv"
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
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// decodeCore is a decode rank's push protocol around its tracker, as a
// state machine: fed the requests registered since its last round, the
// handshakes that finished and prefill's notifications (completion,
// PUSH_FAIL, PUSH_CANCEL_ACK), it routes registrations behind their
// prefill engine's handshake, sends them, counts what prefill answers,
// sends the cancels the tracker orders, and judges a prefill rank that a
// send found gone. It acts only through its edge (decodeEdge: notify a
// prefill agent, start a handshake, load and unload agent metadata, read
// the rank's clocks, signal results); it runs no goroutine and reads no
// clock but its edge's. The tracker is shared with the engine's calls
// (Register, Abort, Drain): the core brackets every access to it with its
// edge's lock and unlock, which the Consumer backs with its mutex (never
// held over I/O) and the simulation with nothing. The Consumer's poller
// goroutine feeds it (consumer.go), and the deterministic simulation
// (sim_test.go) feeds this same code.
type decodeCore struct {
	cfg     decodeConfig
	edge    decodeEdge
	log     *zap.Logger
	stats   *stats.Set
	push    *pushCounters
	stage   *staging.Counters // nil without staging
	tracker *tracker
	peers   map[string]*decodePeer
	// spans records the traced requests' handshake spans (nil: none).
	spans *tracing.Book
	// legacy restores a rule this revision replaced; only the simulation
	// sets it, to show that it finds the hole it left (sim_test.go).
	legacy struct {
		// anySeqCompletion counts a completion for whatever registration
		// of its id the rank holds, live or draining, whatever seq it
		// names (before 61c7e0a).
		anySeqCompletion bool
	}
}

// decodePeer is a prefill engine as one decode rank sees it, keyed by its
// engine id and side-channel address only: the TP and PP sizes a request
// names are checked against the payload, request by request, and never
// stand for the engine.
type decodePeer struct {
	prefill Prefill // EngineID, Host and Port only
	payload *handshake.Payload
	sources []string // agent names of the prefill ranks that write here
	busy    bool     // handshake in flight
	waiting []*decodeReq
	// lastUsed is when a request was last routed to it
	// (RankConfig.EngineTTL).
	lastUsed time.Time
	// suspect is the payload of an incarnation a send found disconnected,
	// with its agents and the send's error, while a probe handshake
	// decides whether it is gone (prefillgone.go); nil otherwise.
	suspect        *handshake.Payload
	suspectSources []string
	suspectWhy     error
}

// shakeResult is a handshake's answer for the peer of key, on either side
// (the writer core's decode engines, the decode core's prefill engines).
type shakeResult struct {
	key     string
	payload *handshake.Payload
	err     error
}

// decodeConfig is what the core knows of its rank and engine.
type decodeConfig struct {
	engineID, host      string
	port                int
	layout              *descriptors.Layout
	vllm                bool
	incarnation         uint64 // decode_incarnation of every PUSH_REG (0 in vLLM's protocol)
	registrationTimeout time.Duration
	cancelTimeout       time.Duration
	engineTTL           time.Duration
}

// decodeEdge is everything the decode core asks of the world around it.
type decodeEdge interface {
	// lock and unlock bracket the core's every access to the tracker,
	// which the engine's calls share.
	lock()
	unlock()
	// notify sends msg to prefill agent to (GenNotif).
	notify(to string, msg []byte) error
	// handshake starts fetching prefill engine pf's payload (peer key);
	// the result comes back to the next tick.
	handshake(key string, pf Prefill)
	// forgetHandshake drops pf's payload from the engine's handshake cache.
	forgetHandshake(pf Prefill)
	loadMD(agent string, md []byte) (string, error)
	unloadMD(agent string) error
	// closing reports whether the rank is closing (no handshake starts).
	closing() bool
	// now reads the rank's clocks: wall, the configured clock
	// (registration deadlines, results), and mono, the monotonic one (the
	// waits that decide when blocks go back). The core reads them at the
	// moment a deadline counts from, after any I/O before it.
	now() instant
	// signal says results wait for Drain.
	signal()
	// stagingOffer returns the staging slot r's registration offers, nil
	// for none (stagedecode.go).
	stagingOffer(p *decodePeer, r *decodeReq) *pushwire.Staging
}

// tick runs after each round of notifications: the handshakes that
// finished, the requests registered since (inbox), deadlines, cancels.
func (d *decodeCore) tick(shakes []shakeResult, inbox []*decodeReq) {
	for _, s := range shakes {
		d.handshakeDone(s)
	}
	for _, r := range inbox {
		d.route(r)
	}
	d.edge.lock()
	n, gaveUp := d.tracker.expire(d.edge.now())
	cancels := d.tracker.takeCancels()
	d.edge.unlock()
	if n > 0 {
		d.push.timeouts.Add(uint64(n))
	}
	if gaveUp > 0 && d.cfg.vllm {
		d.push.writeBound.Add(uint64(gaveUp))
		d.log.Info("pushconn: released the blocks of failed requests once no WRITE of a prefill rank could still land (vLLM's protocol has no PUSH_CANCEL)",
			zap.Int("requests", gaveUp), zap.Duration("registration_timeout", d.cfg.registrationTimeout), zap.Duration("cancel_timeout", d.cfg.cancelTimeout))
	} else if gaveUp > 0 {
		d.push.cancelTimeouts.Add(uint64(gaveUp))
		d.log.Warn("pushconn: released the blocks of failed requests without every prefill rank's answer to PUSH_CANCEL",
			zap.Int("requests", gaveUp), zap.Duration("cancel_timeout", d.cfg.cancelTimeout))
	}
	d.sendCancels(cancels)
	d.edge.lock()
	ready := len(d.tracker.results) > 0
	d.edge.unlock()
	if ready {
		d.edge.signal()
	}
}

// route sends r's registrations if its prefill engine is known, else parks
// it behind the engine's handshake.
func (d *decodeCore) route(r *decodeReq) {
	key := peerKey(r.prefill)
	p := d.peers[key]
	if p == nil {
		d.forgetStalePeers(d.edge.now().wall)
		p = &decodePeer{prefill: Prefill{EngineID: r.prefill.EngineID, Host: r.prefill.Host, Port: r.prefill.Port}}
		d.peers[key] = p
	}
	p.lastUsed = d.edge.now().wall
	if p.payload != nil {
		d.send(p, r)
		return
	}
	if d.spans.Traced(r.id) {
		r.parkedAt = d.edge.now().wall
	}
	p.waiting = append(p.waiting, r)
	if !p.busy {
		p.busy = true
		d.edge.handshake(key, r.prefill)
	}
}

// handshakeDone checks a prefill engine's payload against this rank and
// releases the requests that waited for it.
func (d *decodeCore) handshakeDone(s shakeResult) {
	p := d.peers[s.key]
	p.busy = false
	// A probe first settles the requests of an incarnation it shows gone
	// (unloading its agents' metadata) before the answer's agents load.
	old := p.suspect
	same := d.judgeSuspect(p, s)
	err := s.err
	if err != nil && d.edge.closing() {
		// Close cancelled the handshake: the peer did not fail, and Close
		// ends the requests that waited for it with ErrClosed.
		p.waiting = nil
		return
	}
	if err == nil {
		p.sources, err = d.acceptPrefill(p.prefill, s.payload)
	}
	waiting := p.waiting
	p.waiting = nil
	d.handshakeSpans(p, waiting, err)
	if err != nil {
		d.stats.FailedHandshakes.Inc()
		d.edge.forgetHandshake(p.prefill)
		d.log.Warn("pushconn: handshake with prefill engine failed", zap.String("prefill", p.prefill.EngineID), zap.Error(err))
		d.edge.lock()
		now := d.edge.now()
		for _, r := range waiting {
			if d.tracker.live(r) {
				d.tracker.fail(now, r.id, fmt.Errorf("pushconn: request %q: %w", r.id, err))
			}
		}
		d.edge.unlock()
		d.edge.signal()
		return
	}
	p.payload = s.payload
	if same {
		// The very ranks decode knew: requests sent under the old payload
		// stay matched to it should they turn out gone later.
		p.payload = old
	}
	for i, r := range waiting {
		if p.payload == nil {
			// A send found the agent disconnected and a probe runs: the
			// rest wait for its answer.
			p.waiting = append(p.waiting, waiting[i:]...)
			break
		}
		d.send(p, r)
	}
	d.push.handshakes.Inc()
}

// handshakeSpans records the wait of the traced requests that waited for
// p's handshake, from their parking to its answer (pull's reader records
// the same span).
func (d *decodeCore) handshakeSpans(p *decodePeer, waiting []*decodeReq, err error) {
	var now time.Time
	for _, r := range waiting {
		if r.parkedAt.IsZero() {
			continue
		}
		if now.IsZero() {
			now = d.edge.now().wall
		}
		d.spans.Record(r.id, tracing.Handshake, r.parkedAt, now, err,
			attribute.String("gonixl.remote_engine_id", p.prefill.EngineID),
			attribute.String("gonixl.remote_addr", net.JoinHostPort(p.prefill.Host, strconv.Itoa(p.prefill.Port))))
		r.parkedAt = time.Time{}
	}
}

// acceptPrefill checks that the engine's layouts can write into this rank,
// loads the metadata of the ranks that will write here and returns their
// agent names. The sizes a request names are checked by send.
func (d *decodeCore) acceptPrefill(pf Prefill, pl *handshake.Payload) ([]string, error) {
	ranks, err := stageSources(pf.EngineID, pl, d.cfg.layout)
	if err != nil {
		return nil, err
	}
	if d.cfg.vllm {
		// vLLM's decode counts pp_size * max(1, prefill TP / decode TP)
		// completions; the ranks that write here must be that many.
		if want := vllm.PushCompletions(pl.PPSize, pl.TPSize, d.cfg.layout.TPSize); want != len(ranks) {
			return nil, fmt.Errorf("%w: prefill engine %q: %d of its ranks write into decode rank %d, vLLM's protocol counts %d completions", connector.ErrIncompatible, pf.EngineID, len(ranks), d.cfg.layout.TPRank, want)
		}
	}
	names := make([]string, 0, len(ranks))
	for _, world := range ranks {
		rk := &pl.Ranks[world]
		name, err := d.edge.loadMD(rk.Agent, rk.Metadata)
		if err != nil {
			return nil, fmt.Errorf("%w: prefill engine %q rank %d: load agent metadata: %v", connector.ErrHandshake, pf.EngineID, world, err)
		}
		names = append(names, name)
	}
	return names, nil
}

// send registers r with every prefill rank that writes into this rank,
// once its prefill sizes agree with the engine's handshake.
func (d *decodeCore) send(p *decodePeer, r *decodeReq) {
	var wrong error
	switch pl := p.payload; {
	case r.prefill.TPSize != pl.TPSize:
		wrong = invalidf("request %q: Prefill.TPSize is %d, prefill engine %q has TP size %d (its handshake)", r.id, r.prefill.TPSize, p.prefill.EngineID, pl.TPSize)
	case r.prefill.PPSize != pl.PPSize:
		wrong = invalidf("request %q: Prefill.PPSize is %d, prefill engine %q has PP size %d (its handshake)", r.id, r.prefill.PPSize, p.prefill.EngineID, pl.PPSize)
	}
	if wrong != nil {
		d.edge.lock()
		if d.tracker.live(r) {
			d.tracker.fail(d.edge.now(), r.id, wrong)
		}
		d.edge.unlock()
		d.edge.signal()
		return
	}
	d.edge.lock()
	alive := d.tracker.expect(d.edge.now(), r, p.sources)
	if alive {
		r.regAt = d.edge.now().mono
		r.via, r.viaSources = p.payload, p.sources
	}
	done := !alive && len(d.tracker.results) > 0
	d.edge.unlock()
	if !alive {
		if done {
			d.edge.signal() // written whole on sibling ranks' registrations
		}
		return // ended while it waited (timeout, Abort), or written already
	}
	reg := &pushwire.Registration{
		RequestID:      r.id,
		DecodeEngineID: d.cfg.engineID,
		DecodeHost:     d.cfg.host,
		DecodePort:     d.cfg.port,
		DecodeTPSize:   d.cfg.layout.TPSize,
		LocalBlockIDs:  r.blocks,
		RemoteEngineID: p.prefill.EngineID,
		RemoteHost:     p.prefill.Host,
		RemotePort:     p.prefill.Port,
		RemoteTPSize:   r.prefill.TPSize,
		RemotePPSize:   r.prefill.PPSize,
		TransferID:     r.transferID,

		DecodeIncarnation: d.cfg.incarnation,
		Seq:               r.seq,
		Staging:           d.edge.stagingOffer(p, r),
	}
	msg, err := pushwire.EncodeRegistration(reg)
	first := true // no agent has been handed the registration yet
	if err == nil {
		for _, agent := range p.sources {
			// Counted as sent before the call: a notification the agent
			// took may reach the rank even when the call reports an error.
			// Checked and marked under one lock: a request that ended
			// meanwhile (Abort, from the engine's goroutine) owes its
			// PUSH_CANCEL to exactly the ranks marked so far, so no other
			// rank may get the registration after it ended.
			d.edge.lock()
			live := d.tracker.live(r)
			wrote := r.sources[agent] == srcWritten
			if live && !wrote {
				d.tracker.sent(r, agent)
			}
			d.edge.unlock()
			if !live {
				return
			}
			if wrote {
				// vLLM's protocol: that rank already wrote here on a
				// sibling rank's registration; a vLLM prefill would keep
				// this one unmatched (pending) for a later request of
				// the id.
				continue
			}
			if err = d.edge.notify(agent, msg); err != nil {
				err = fmt.Errorf("%w to prefill agent %q: %w", ErrNotifySend, agent, err)
				break
			}
			first = false
			d.push.regsSent.Inc()
		}
	}
	if err != nil {
		d.stats.FailedNotifications.Inc()
		if peerGone(err) && d.resendAfterProbe(p, r, first, err) {
			return
		}
		d.edge.lock()
		if d.tracker.live(r) {
			d.tracker.fail(d.edge.now(), r.id, fmt.Errorf("pushconn: request %q: %w", r.id, err))
		}
		d.edge.unlock()
		d.edge.signal()
	}
}

// onCompletion handles "<request id>:<n>[#<seq>]" from a prefill rank
// whose WRITE has landed.
func (d *decodeCore) onCompletion(sender string, msg []byte) {
	comp, err := notif.DecodeSeqCompletion(msg)
	if err != nil {
		d.stats.MalformedNotifications.Inc()
		d.log.Debug("pushconn: dropped a malformed notification", zap.String("sender", sender), zap.Error(err))
		return
	}
	d.edge.lock()
	seq := comp.Seq
	if d.legacy.anySeqCompletion {
		seq = d.tracker.seqOf(comp.ID)
	}
	a := d.tracker.complete(d.edge.now(), comp.ID, sender, seq)
	d.edge.unlock()
	if d.stage != nil && a != arrivalUnknown && a != arrivalStranger && a != arrivalStale && a != arrivalEarly {
		d.stage.Direct.Inc()
	}
	d.counted(sender, comp, a)
}

// counted acts on what completion comp from prefill agent sender did to
// the tracker.
func (d *decodeCore) counted(sender string, comp notif.Completion, a arrival) {
	switch a {
	case arrivalStale:
		d.push.staleCompletions.Inc()
		d.log.Debug("pushconn: dropped a completion of another registration of the request id",
			zap.String("sender", sender), zap.String("request", comp.ID), zap.Uint64("seq", comp.Seq))
	case arrivalDone, arrivalReleased:
		d.edge.signal()
	case arrivalSettled, arrivalEarly:
	case arrivalLate:
		d.stats.LateNotifications.Inc()
	case arrivalUnknown, arrivalStranger, arrivalDuplicate:
		d.stats.UnknownNotifications.Inc()
	}
}

// onFailure handles a prefill rank's PUSH_FAIL: the request fails now.
func (d *decodeCore) onFailure(sender string, msg []byte) {
	f, err := pushwire.DecodeFailure(msg)
	if err != nil {
		d.stats.MalformedNotifications.Inc()
		d.log.Debug("pushconn: dropped a malformed PUSH_FAIL", zap.String("sender", sender), zap.Error(err))
		return
	}
	d.push.failReceived.Inc()
	d.edge.lock()
	var ended bool
	now := d.edge.now()
	if d.tracker.isSource(f.RequestID, sender, f.Seq) {
		ended = d.tracker.failFrom(now, f.RequestID, sender, &PushError{
			RequestID: f.RequestID, EngineID: f.EngineID, Rank: f.Rank, Kind: string(f.Kind), Reason: f.Reason,
		})
	} else if _, live := d.tracker.reqs[f.RequestID]; !live {
		// A rank of a request that already failed: it will not write.
		switch d.tracker.settle(now, f.RequestID, sender, srcFailed, f.Seq) {
		case arrivalSettled:
			ended = true
		case arrivalReleased:
			ended = true
			d.edge.signal()
		}
		d.edge.unlock()
		if !ended {
			d.stats.UnknownNotifications.Inc()
		}
		return
	}
	d.edge.unlock()
	if ended {
		d.edge.signal()
		return
	}
	d.stats.UnknownNotifications.Inc()
}

// onCancelAck handles a prefill rank's PUSH_CANCEL_ACK: no WRITE of that
// rank can land in the cancelled request's blocks any more.
func (d *decodeCore) onCancelAck(sender string, msg []byte) {
	a, err := pushwire.DecodeCancelAck(msg)
	if err != nil {
		d.stats.MalformedNotifications.Inc()
		d.log.Debug("pushconn: dropped a malformed PUSH_CANCEL_ACK", zap.String("sender", sender), zap.Error(err))
		return
	}
	d.push.cancelAckReceived.Inc()
	d.edge.lock()
	res := d.tracker.ack(d.edge.now(), a.RequestID, sender, a.Seq)
	d.edge.unlock()
	switch res {
	case arrivalReleased:
		d.edge.signal()
	case arrivalSettled, arrivalLate:
	default:
		d.stats.UnknownNotifications.Inc()
	}
}

// sendCancels tells prefill ranks that still may hold a failed request's
// registration to drop it. A PUSH_CANCEL that cannot be sent is counted
// (and sent again later while the request drains).
func (d *decodeCore) sendCancels(orders []cancelOrder) {
	for _, o := range orders {
		msg, err := pushwire.EncodeCancel(&pushwire.Cancel{
			RequestID: o.id, TransferID: o.transferID, EngineID: d.cfg.engineID, Rank: d.cfg.layout.TPRank, Seq: o.seq,
		})
		for _, agent := range o.agents {
			sendErr := err
			if sendErr == nil {
				sendErr = d.edge.notify(agent, msg)
			}
			if sendErr != nil {
				d.push.cancelUndeliver.Inc()
				d.stats.FailedNotifications.Inc()
				d.log.Debug("pushconn: could not send PUSH_CANCEL", zap.String("request", o.id), zap.String("to", agent), zap.Error(sendErr))
				if peerGone(sendErr) {
					d.cancelUndeliverable(o.id, sendErr)
				}
				continue
			}
			d.push.cancelSent.Inc()
		}
	}
}

// seqOf is the seq of the registration of id the tracker holds, live or
// draining (0: none). Passed to complete as a completion's, it counts the
// completion for that registration whatever seq it named, as b6a750d did
// (legacy rules only).
func (t *tracker) seqOf(id string) uint64 {
	if r, ok := t.reqs[id]; ok {
		return r.seq
	}
	if r, ok := t.draining[id]; ok {
		return r.seq
	}
	return 0
}
