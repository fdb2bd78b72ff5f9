package pushconn

import (
	"fmt"
	"slices"
	"time"

	"github.com/gonixl/gonixl/internal/lease"
)

// lateWindow is how long decode remembers an ended request, to tell a late
// completion (counted as late) from one for a request it never had
// (counted as unknown).
const lateWindow = time.Minute

// decodeReq is one registered request on a decode rank.
type decodeReq struct {
	id         string
	transferID string
	prefill    Prefill
	blocks     [][]int
	start      time.Time
	// sources maps each prefill agent that will write to whether it has
	// reported; nil until the handshake says who they are.
	sources  map[string]bool
	reported int
}

// arrival is what a completion notification did to the tracker.
type arrival int

const (
	arrivalCounted   arrival = iota + 1 // one more rank reported
	arrivalDone                         // the last expected rank reported
	arrivalDuplicate                    // that rank had already reported
	arrivalStranger                     // from an agent that does not write this request
	arrivalLate                         // the request already ended
	arrivalUnknown                      // never registered here
)

// tracker is the decode side's state machine: requests from registration
// to their one result. Time is an argument; its owner does all I/O and
// serialises calls.
type tracker struct {
	reqs      map[string]*decodeReq
	deadlines *lease.Table
	ended     *lease.Table
	results   []Result
	timeout   time.Duration
	// cancels are the PUSH_CANCELs owed to prefill ranks for requests
	// that ended other than by success; the owner sends them.
	cancels []cancelOrder
}

// cancelOrder is a failed request whose registration some prefill ranks
// may still hold.
type cancelOrder struct {
	id, transferID string
	agents         []string // the prefill agents to tell
	// result is published only once the cancels went out, so an engine
	// that reuses the blocks when it sees the failure does so after
	// prefill was told.
	result Result
}

func newTracker(timeout time.Duration) *tracker {
	d, _ := lease.New(timeout) // timeout > 0: defaults applied before
	e, _ := lease.New(lateWindow)
	return &tracker{reqs: map[string]*decodeReq{}, deadlines: d, ended: e, timeout: timeout}
}

// add starts tracking r at now; its deadline is now plus the timeout.
func (t *tracker) add(now time.Time, r *decodeReq) error {
	if _, ok := t.reqs[r.id]; ok {
		return invalidf("request %q is already registered", r.id)
	}
	if err := t.deadlines.Add(r.id, now); err != nil {
		return invalidf("request %q: %v", r.id, err)
	}
	r.start = now
	t.reqs[r.id] = r
	return nil
}

// expect records which prefill agents will write request id; it reports
// false if the request already ended.
func (t *tracker) expect(id string, agents []string) bool {
	r, ok := t.reqs[id]
	if !ok {
		return false
	}
	r.sources = make(map[string]bool, len(agents))
	for _, a := range agents {
		r.sources[a] = false
	}
	return true
}

// complete counts a completion for request id from the agent sender.
func (t *tracker) complete(now time.Time, id, sender string) arrival {
	r, ok := t.reqs[id]
	if !ok {
		t.ended.Expire(now)
		if _, late := t.ended.Deadline(id); late {
			return arrivalLate
		}
		return arrivalUnknown
	}
	done, known := r.sources[sender]
	switch {
	case !known:
		return arrivalStranger
	case done:
		return arrivalDuplicate
	}
	r.sources[sender] = true
	r.reported++
	if r.reported < len(r.sources) {
		return arrivalCounted
	}
	t.end(now, r, nil)
	return arrivalDone
}

// isSource reports whether sender writes request id.
func (t *tracker) isSource(id, sender string) bool {
	r, ok := t.reqs[id]
	if !ok {
		return false
	}
	_, known := r.sources[sender]
	return known
}

// fail ends request id with err; it reports false if it had already ended.
func (t *tracker) fail(now time.Time, id string, err error) bool {
	return t.failFrom(now, id, "", err)
}

// failFrom ends request id with err reported by prefill agent from, which
// needs no PUSH_CANCEL; it reports false if the request had already ended.
func (t *tracker) failFrom(now time.Time, id, from string, err error) bool {
	r, ok := t.reqs[id]
	if !ok {
		return false
	}
	t.endFrom(now, r, from, err)
	return true
}

func (t *tracker) end(now time.Time, r *decodeReq, err error) { t.endFrom(now, r, "", err) }

// endFrom ends r with err; a failure owes a PUSH_CANCEL to every prefill
// rank that got the registration and has neither written nor failed it
// (from), since it may still hold the registration and WRITE later into
// blocks the engine will reuse.
func (t *tracker) endFrom(now time.Time, r *decodeReq, from string, err error) {
	if err != nil && r.sources != nil {
		var agents []string
		for a, done := range r.sources {
			if !done && a != from {
				agents = append(agents, a)
			}
		}
		if len(agents) > 0 {
			slices.Sort(agents)
			res := Result{RequestID: r.id, Err: err, Start: r.start, End: now}
			t.cancels = append(t.cancels, cancelOrder{id: r.id, transferID: r.transferID, agents: agents, result: res})
			t.forget(now, r)
			return
		}
	}
	t.forget(now, r)
	t.results = append(t.results, Result{RequestID: r.id, Err: err, Start: r.start, End: now})
}

func (t *tracker) forget(now time.Time, r *decodeReq) {
	delete(t.reqs, r.id)
	t.deadlines.Complete(r.id)
	t.ended.Complete(r.id)
	_ = t.ended.Add(r.id, now)
}

// expire ends every request whose deadline passed, with a timeout error
// that says how many ranks had reported.
func (t *tracker) expire(now time.Time) int {
	ids := t.deadlines.Expire(now)
	for _, id := range ids {
		r := t.reqs[id]
		var detail string
		if r.sources == nil {
			detail = "the handshake with the prefill engine had not completed"
		} else {
			detail = fmt.Sprintf("%d of %d prefill ranks reported", r.reported, len(r.sources))
		}
		t.deadlines.Complete(id) // already removed by Expire; keeps end idempotent
		t.end(now, r, fmt.Errorf("%w: request %q from prefill engine %q: no push within %v (%s)",
			ErrRegistrationTimeout, id, r.prefill.EngineID, t.timeout, detail))
	}
	t.ended.Expire(now)
	return len(ids)
}

// next returns the earliest registration deadline.
func (t *tracker) next() (time.Time, bool) { return t.deadlines.Next() }

// drain returns and forgets the results so far.
func (t *tracker) drain() []Result {
	out := t.results
	t.results = nil
	return out
}

// takeCancels returns and forgets the PUSH_CANCELs owed so far; their
// results wait for publish.
func (t *tracker) takeCancels() []cancelOrder {
	out := t.cancels
	t.cancels = nil
	return out
}

// publish makes the results of cancelled requests visible to drain, once
// their PUSH_CANCELs were sent.
func (t *tracker) publish(orders []cancelOrder) {
	for _, o := range orders {
		t.results = append(t.results, o.result)
	}
}

// pending returns how many requests wait for their result.
func (t *tracker) pending() int { return len(t.reqs) }
