package pushconn

import (
	"fmt"
	"slices"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/groupids"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/lease"
)

// lateWindow is how long decode remembers an ended request, to tell a late
// completion (counted as late) from one for a request it never had
// (counted as unknown).
const lateWindow = time.Minute

// cancelResends is how many times, spread over the cancel timeout, decode
// sends its PUSH_CANCEL to a prefill rank that has not answered: one lost
// notification must not cost the whole wait.
const cancelResends = 4

// instant is one reading of a rank's two clocks: wall, its configured
// clock (RankConfig.Clock), which times registration deadlines, results
// and prefill's lease; and mono, its monotonic clock (lease.MonoNow),
// which times every deadline that decides when blocks go back to the
// engine (decode's cancel wait and vLLM's write bound, prefill's WRITE
// timeouts), so that no step of the configured clock ends them early.
type instant struct{ wall, mono time.Time }

// srcState is where one prefill rank stands with a decode request.
type srcState uint8

const (
	srcWaiting srcState = iota // registration sent; the rank may still write
	srcWritten                 // its completion arrived: its WRITE ended
	srcFailed                  // it sent PUSH_FAIL: it will not write
	srcAcked                   // it acknowledged the PUSH_CANCEL
	srcUnsent                  // the registration never went to it
	srcGone                    // its incarnation died and its metadata is unloaded: it cannot write
)

// decodeReq is one registered request on a decode rank.
type decodeReq struct {
	id         string
	transferID string
	prefill    Prefill
	blocks     [][]int
	seq        uint64 // the registration's registration_seq
	start      time.Time
	// startMono is start on the rank's monotonic clock.
	startMono time.Time
	// regAt is when its registration was first handed to the agent, on
	// the rank's monotonic clock (zero until then): in vLLM's protocol the
	// bound on prefill's WRITEs counts from it.
	regAt time.Time
	// sources maps each prefill agent that was sent the registration to
	// where it stands; nil until the registration is sent.
	sources  map[string]srcState
	reported int // completions
	// result is the request's end, kept back while it drains (ended other
	// than by success, some ranks may still write into its blocks).
	result connector.Result
	// stage is the staging slot decode offered for the request, nil when
	// none; it is released with the request's result.
	stage *decodeStage
	// via is the prefill engine's handshake payload the registration
	// went out under, and viaSources its agents (prefillgone.go); nil
	// until then.
	via        *handshake.Payload
	viaSources []string
	// parkedAt is when it was parked behind its prefill engine's
	// handshake, on the wall clock, for its handshake span; zero when it
	// has no trace or did not wait.
	parkedAt time.Time
	// early are the prefill agents whose completion came before the
	// request's sources were known (tracker.siblings).
	early []string
	// resent: its registration was parked for a second try once, after
	// the first agent it went to was found disconnected.
	resent bool
}

// waiting returns the prefill agents that may still write into r's blocks.
func (r *decodeReq) waiting() []string {
	var out []string
	for a, s := range r.sources {
		if s == srcWaiting {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// arrival is what a notification from a prefill rank did to the tracker.
type arrival int

const (
	arrivalCounted   arrival = iota + 1 // one more rank reported
	arrivalDone                         // the last expected rank reported
	arrivalDuplicate                    // that rank had already reported
	arrivalStranger                     // from an agent that does not write this request
	arrivalLate                         // the request already ended
	arrivalUnknown                      // never registered here
	arrivalSettled                      // a rank of a draining request ended; more may follow
	arrivalReleased                     // the last rank of a draining request ended: its result is out
	arrivalStale                        // a completion of another registration of the id
	arrivalEarly                        // vLLM's protocol: before this rank's registration went out (kept)
)

// tracker is the decode side's state machine: requests from registration
// to their one result. A request that ends other than by success drains
// first: its connector.Result (when the engine takes the blocks back) is held until
// every prefill rank that got the registration has written, failed or
// acknowledged the PUSH_CANCEL, or the cancel timeout passed. Time is an
// argument; its owner does all I/O and serialises calls.
type tracker struct {
	// recompute: failed Results list the request's blocks (connector.PolicyRecompute).
	recompute bool
	// onPublish, when set, runs as a request's result goes out: nothing
	// can write into its blocks (or its staging slot) any more.
	onPublish func(r *decodeReq)
	reqs      map[string]*decodeReq // live
	draining  map[string]*decodeReq // ended, waiting for their ranks
	deadlines *lease.Table          // registration timeouts of live requests (wall)
	drainEnd  *lease.Table          // cancel timeouts of draining requests (mono)
	resend    *lease.Table          // next PUSH_CANCEL of draining requests (mono)
	ended     *lease.Table
	results   []connector.Result
	timeout   time.Duration
	// cancels are the PUSH_CANCELs owed to prefill ranks; the owner sends
	// them.
	cancels []cancelOrder
	// noCancel: the engine speaks vLLM's protocol, which has no
	// PUSH_CANCEL and no acknowledgement. A request that ends other than by
	// success drains until no WRITE of a prefill rank can still land
	// (writeBound), or until every rank it waited for has written.
	noCancel bool
	// cancelTimeout is the drain's bound after the registration timeout
	// in vLLM's protocol (see writeBound).
	cancelTimeout time.Duration
	// siblings: the engine speaks vLLM's protocol, in which a prefill
	// rank WRITEs into every decode rank it targets on the first
	// registration of the request it gets, from whichever decode rank
	// (push_worker.py@0.34.0, _handle_push_reg_notif and
	// _do_start_push_kv): this rank's blocks may be written, and their
	// completion arrive, before its own registration went out. Such a
	// completion counts (early, then when the rank's sources are known).
	siblings bool
}

// cancelOrder is a PUSH_CANCEL owed to some prefill ranks for a request
// that ended other than by success.
type cancelOrder struct {
	id, transferID string
	seq            uint64   // the registration's registration_seq
	agents         []string // the prefill agents to tell
}

func newTracker(timeout, cancelTimeout time.Duration) *tracker {
	d, _ := lease.New(timeout) // timeouts > 0: defaults applied before
	e, _ := lease.New(lateWindow)
	de, _ := lease.New(cancelTimeout)
	rs, _ := lease.New(max(cancelTimeout/cancelResends, time.Millisecond))
	return &tracker{reqs: map[string]*decodeReq{}, draining: map[string]*decodeReq{},
		deadlines: d, drainEnd: de, resend: rs, ended: e, timeout: timeout, cancelTimeout: cancelTimeout}
}

// writeBound is when, in vLLM's protocol, no WRITE of a prefill rank can
// still land in the blocks of r, which ended at now other than by success
// with no way to tell prefill: the registration timeout after the
// registration went out, then the cancel timeout, but never before now
// plus the cancel timeout. A prefill rank gives a registration up within
// its own registration timeout, shorter than decode's (gonixl's
// Producer's is, by rule; a vLLM prefill's request runs within that time
// or its blocks lapse with its lease), and a WRITE it posted before then
// moves bytes for at most two write timeouts, which the cancel timeout
// covers with a margin for the notifications (see DefaultCancelTimeout).
// The drain table adds the cancel timeout itself: this returns the time
// it counts from. All of it is on the rank's monotonic clock.
func (t *tracker) writeBound(now time.Time, r *decodeReq) time.Time {
	from := r.regAt
	if from.IsZero() {
		from = r.startMono
	}
	if at := from.Add(t.timeout); at.After(now) {
		return at
	}
	return now
}

// add starts tracking r at now; its deadline is now plus the timeout.
func (t *tracker) add(now instant, r *decodeReq) error {
	if _, ok := t.reqs[r.id]; ok {
		return invalidf("request %q is already registered", r.id)
	}
	if _, ok := t.draining[r.id]; ok {
		return invalidf("request %q has ended but its result is not out yet (prefill ranks may still write into its blocks): register it again after Drain returned it", r.id)
	}
	if err := t.deadlines.Add(r.id, now.wall); err != nil {
		return invalidf("request %q: %v", r.id, err)
	}
	r.start, r.startMono = now.wall, now.mono
	t.reqs[r.id] = r
	return nil
}

// live reports whether r itself (not another request of its id) is
// waiting for its push.
func (t *tracker) live(r *decodeReq) bool { return t.reqs[r.id] == r }

// expect records which prefill agents are sent request r's registration;
// it reports false if r already ended (the id may belong to a newer
// request by now).
func (t *tracker) expect(now instant, r *decodeReq, agents []string) (send bool) {
	if !t.live(r) {
		return false
	}
	r.sources = make(map[string]srcState, len(agents))
	for _, a := range agents {
		r.sources[a] = srcUnsent
	}
	// Completions that came before (vLLM's protocol: on a sibling rank's
	// registration) count now; those of agents that do not write here
	// count nothing.
	for _, a := range r.early {
		if r.sources[a] == srcUnsent {
			r.sources[a] = srcWritten
			r.reported++
		}
	}
	r.early = nil
	if r.reported > 0 && r.reported == len(r.sources) {
		t.end(now, r, nil) // every rank wrote: no registration to send
		return false
	}
	return true
}

// sent records that agent was handed r's registration.
func (t *tracker) sent(r *decodeReq, agent string) {
	if r.sources[agent] == srcUnsent {
		r.sources[agent] = srcWaiting
	}
}

// complete counts a completion for request id from the agent sender,
// naming registration seq (0: none). It counts only for the registration
// of that seq: a completion of another registration of the id (a late,
// duplicated copy of an earlier request's) is stale and changes nothing,
// live or draining. A completion without a seq for a registration that had
// one is stale too: gonixl's prefill always echoes the seq, so only
// another registration's message, or a peer that drops the seq, sends
// one (see "Completions" in the package documentation).
func (t *tracker) complete(now instant, id, sender string, seq uint64) arrival {
	r, ok := t.reqs[id]
	if !ok {
		if d, draining := t.draining[id]; draining && d.seq != seq {
			return arrivalStale
		}
		return t.settle(now, id, sender, srcWritten, seq)
	}
	if r.seq != seq {
		return arrivalStale
	}
	st, known := r.sources[sender]
	switch {
	case t.siblings && r.sources == nil:
		// Its prefill engine's handshake is still running: the sources
		// are not known yet (expect settles it).
		if !slices.Contains(r.early, sender) {
			r.early = append(r.early, sender)
		}
		return arrivalEarly
	case t.siblings && known && st == srcUnsent:
		// Written on a sibling rank's registration before this rank's
		// went to that agent: the agent will not write again.
	case !known || st == srcUnsent:
		return arrivalStranger
	case st != srcWaiting:
		return arrivalDuplicate
	}
	r.sources[sender] = srcWritten
	r.reported++
	if r.reported < len(r.sources) {
		return arrivalCounted
	}
	t.end(now, r, nil)
	return arrivalDone
}

// scatterFailed ends request id, registered with seq, whose staged chunk
// from prefill agent sender arrived but could not be scattered, with err.
// written says every chunk of that rank has arrived (it will not write
// again): the rank is then settled; otherwise it stays expected, and the
// request drains until the rank's last chunk or its cancel answer.
func (t *tracker) scatterFailed(now instant, id, sender string, seq uint64, written bool, err error) {
	if r, ok := t.reqs[id]; ok && r.seq == seq {
		if st, known := r.sources[sender]; known && st == srcWaiting && written {
			r.sources[sender] = srcWritten
		}
		t.end(now, r, err)
		return
	}
	if d, ok := t.draining[id]; ok && d.seq == seq && written {
		t.settle(now, id, sender, srcWritten, seq)
	}
}

// stagedPart returns the request that prefill agent sender may have
// written into a staging slot (live, or draining with that rank still
// expected), or nil; stale reports a staged completion of another
// registration of the id (its seq is not the request's), as complete does.
func (t *tracker) stagedPart(id, sender string, seq uint64) (r *decodeReq, stale bool) {
	r, ok := t.reqs[id]
	if !ok {
		r, ok = t.draining[id]
	}
	switch {
	case !ok:
		return nil, false
	case r.seq != seq:
		return nil, true
	case r.stage == nil || r.sources[sender] != srcWaiting:
		return nil, false
	}
	return r, false
}

// settle records that prefill agent sender of draining request id ended
// its part (to state st) and releases the request when it was the last.
func (t *tracker) settle(now instant, id, sender string, st srcState, seq uint64) arrival {
	r, ok := t.draining[id]
	if !ok {
		t.ended.Expire(now.wall)
		if _, late := t.ended.Deadline(id); late {
			return arrivalLate
		}
		return arrivalUnknown
	}
	if seq != 0 && r.seq != 0 && seq != r.seq {
		// An answer about an earlier registration of this id (a repeated
		// ack, a late PUSH_FAIL): nothing of this one.
		return arrivalLate
	}
	if cur, known := r.sources[sender]; !known || cur != srcWaiting {
		return arrivalLate
	}
	r.sources[sender] = st
	if len(r.waiting()) > 0 {
		return arrivalSettled
	}
	t.release(now, r)
	return arrivalReleased
}

// ack records prefill agent sender's PUSH_CANCEL_ACK for request id.
func (t *tracker) ack(now instant, id, sender string, seq uint64) arrival {
	if _, live := t.reqs[id]; live {
		// An answer to the cancel of an earlier request of this id, whose
		// result is out: nothing of this one.
		return arrivalLate
	}
	return t.settle(now, id, sender, srcAcked, seq)
}

// isSource reports whether sender was sent request id's registration.
func (t *tracker) isSource(id, sender string, seq uint64) bool {
	r, ok := t.reqs[id]
	if !ok || seq != 0 && r.seq != 0 && seq != r.seq {
		return false
	}
	st, known := r.sources[sender]
	return known && st != srcUnsent
}

// fail ends request id with err; it reports false if it had already ended.
func (t *tracker) fail(now instant, id string, err error) bool {
	return t.failFrom(now, id, "", err)
}

// failFrom ends request id with err reported by prefill agent from, which
// will not write; it reports false if the request had already ended. A
// PUSH_FAIL for a draining request settles that rank.
func (t *tracker) failFrom(now instant, id, from string, err error) bool {
	r, ok := t.reqs[id]
	if !ok {
		if from != "" {
			t.settle(now, id, from, srcFailed, 0)
		}
		return false
	}
	if from != "" {
		if st, known := r.sources[from]; known && st == srcWaiting {
			r.sources[from] = srcFailed
		}
	}
	t.end(now, r, err)
	return true
}

// end ends live request r with err (nil: done). A failure whose
// registration some prefill ranks may still write drains: PUSH_CANCELs are
// owed to them and the connector.Result waits (see tracker).
func (t *tracker) end(now instant, r *decodeReq, err error) {
	delete(t.reqs, r.id)
	t.deadlines.Complete(r.id)
	r.result = connector.Result{RequestID: r.id, Err: err, Start: r.start, End: now.wall}
	if err != nil && t.recompute && len(r.blocks) > 0 {
		r.result.InvalidBlocks = groupids.Flatten(r.blocks) // every group's, in order
	}
	if err != nil {
		if agents := r.waiting(); len(agents) > 0 {
			t.draining[r.id] = r
			if t.noCancel {
				_ = t.drainEnd.Add(r.id, t.writeBound(now.mono, r))
				return
			}
			_ = t.drainEnd.Add(r.id, now.mono)
			_ = t.resend.Add(r.id, now.mono)
			t.cancels = append(t.cancels, cancelOrder{id: r.id, transferID: r.transferID, seq: r.seq, agents: agents})
			return
		}
	}
	t.publish(now, r)
}

// release ends draining request r's wait: its result goes out.
func (t *tracker) release(now instant, r *decodeReq) {
	delete(t.draining, r.id)
	t.drainEnd.Complete(r.id)
	t.resend.Complete(r.id)
	t.publish(now, r)
}

func (t *tracker) publish(now instant, r *decodeReq) {
	if t.onPublish != nil {
		t.onPublish(r)
	}
	t.results = append(t.results, r.result)
	t.ended.Complete(r.id)
	_ = t.ended.Add(r.id, now.wall)
}

// expire ends every request whose deadline passed, with a timeout error
// that says how many ranks had reported; resends the PUSH_CANCELs of
// draining requests that are due; and releases draining requests whose
// cancel timeout passed (on the monotonic clock: no step of the wall clock
// hands blocks back early). It returns how many requests timed out and how
// many were released without every rank's answer.
func (t *tracker) expire(now instant) (timeouts, gaveUp int) {
	ids := t.deadlines.Expire(now.wall)
	for _, id := range ids {
		r := t.reqs[id]
		var detail string
		if r.sources == nil {
			detail = "the handshake with the prefill engine had not completed"
		} else {
			detail = fmt.Sprintf("%d of %d prefill ranks reported", r.reported, len(r.sources))
		}
		t.end(now, r, fmt.Errorf("%w: request %q from prefill engine %q: no push within %v (%s)",
			ErrRegistrationTimeout, id, r.prefill.EngineID, t.timeout, detail))
	}
	for _, id := range t.drainEnd.Expire(now.mono) {
		if r := t.draining[id]; r != nil {
			gaveUp++
			t.release(now, r)
		}
	}
	for _, id := range t.resend.Expire(now.mono) {
		if r := t.draining[id]; r != nil {
			t.cancels = append(t.cancels, cancelOrder{id: r.id, transferID: r.transferID, seq: r.seq, agents: r.waiting()})
			_ = t.resend.Add(id, now.mono)
		}
	}
	t.ended.Expire(now.wall)
	return len(ids), gaveUp
}

// releaseAll publishes every draining request's result (the rank closes:
// its memory is deregistered, so no WRITE can land any more).
func (t *tracker) releaseAll(now instant) {
	ids := make([]string, 0, len(t.draining))
	for id := range t.draining {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		t.release(now, t.draining[id])
	}
}

// drain returns and forgets the results so far.
func (t *tracker) drain() []connector.Result {
	out := t.results
	t.results = nil
	return out
}

// takeCancels returns and forgets the PUSH_CANCELs owed so far.
func (t *tracker) takeCancels() []cancelOrder {
	out := t.cancels
	t.cancels = nil
	return out
}

// pending returns how many requests wait for their result: live ones and
// ended ones whose blocks some prefill rank may still write.
func (t *tracker) pending() int { return len(t.reqs) + len(t.draining) }
