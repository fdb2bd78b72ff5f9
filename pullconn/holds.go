package pullconn

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/internal/lease"
	"github.com/gonixl/gonixl/internal/notif"
)

// holds is a prefill rank's protocol state: the requests whose blocks it
// holds, how many completions each still expects, their leases, and the ids
// that expired recently (to tell a late completion from an unknown one). It
// is a pure state machine: its owner passes the time in and does the I/O.
type holds struct {
	tp int // this engine's TP size, for the expected completion count
	// countGiven: completions say how many to expect (vLLM's protocol
	// since its connector version 12), not decode's TP size.
	countGiven bool
	// keyed: every reader of this rank's holds names the hold it read in
	// its completions ("<id>:<n>#<key>"), as every gonixl decode does to
	// a prefill that pins (all of gonixl's protocol). A plain "<id>:<n>"
	// then comes from no reader and is refused: any agent that loaded
	// this rank's metadata could send one and release a hold before its
	// decode read it. vLLM's protocol has no keys, and cannot refuse them.
	keyed   bool
	leases  *lease.Table
	reqs    map[string]*held
	expired recent
	// overdue are held requests whose lease ran out while a reader's pin
	// still keeps them, with the lease's deadline: released once the pin
	// ended and that deadline is past on the rank's clock again (it may
	// have stepped back meanwhile), or on completions.
	overdue map[string]time.Time
	// dropped are ids drop released recently, and dropWhy the reason it was
	// given: a pin of one is answered with it.
	dropped recent
	dropWhy string
}

type held struct {
	aborted bool // the engine dropped it: no more extensions
	blocks  []int
	// key identifies this hold (Params.holdKey: id, blocks, advertised
	// deadline, staging slot); 0 until RequestFinished set it, and a
	// confirmation never matches 0.
	key uint64
	// reader is the decode engine the hold is bound to: the first engine
	// that asked about it (a hold query or a confirmation). Every other
	// engine is answered "not held", and NIXL completions count only from
	// readers, the reader's agents that asked. Empty: nobody asked yet (a
	// vLLM decode never does), and any completion counts.
	reader  string
	readers map[string]bool
	// pinUntil is when the last pin a reader was granted ends, on the
	// rank's monotonic clock: until then no lease expiry releases the
	// hold (its completions still do). Zero: never pinned.
	pinUntil time.Time
	// made is when the hold was made, on the rank's monotonic clock (zero
	// until its Producer set it): drop lets a hold nobody asked about wait
	// that long.
	made     time.Time
	expected int // completions to wait for; 0 until the first one says
	got      int
	// from are the decode agents whose completion was counted: one decode
	// rank's second completion (a second load of the same request) must
	// not free blocks another rank still reads.
	from map[string]bool
}

// completionOutcome is what one completion message did.
type completionOutcome int

const (
	completionCounted   completionOutcome = iota + 1 // counted, more expected
	completionDone                                   // the last expected one: release
	completionUnknown                                // no such request
	completionLate                                   // the request's lease already expired
	completionInvalid                                // count disagrees with earlier ones
	completionDuplicate                              // that decode agent's completion was counted already
	completionForeign                                // from an agent of another engine than the hold's reader
	completionStale                                  // names another hold of the id (its key), or none for a pinned hold
	completionPlain                                  // names no hold where every reader names the one it read (keyed)
)

func newHolds(tp int, ttl time.Duration, remember int) (*holds, error) {
	t, err := lease.New(ttl)
	if err != nil {
		return nil, err
	}
	return &holds{tp: tp, leases: t, reqs: map[string]*held{}, expired: newRecent(remember), dropped: newRecent(remember), overdue: map[string]time.Time{}}, nil
}

// setKey records the identity of id's hold once its Params are made.
func (h *holds) setKey(id string, key uint64) {
	if r, ok := h.reqs[id]; ok {
		r.key = key
	}
}

// bind binds id's hold to reader (agent asking) unless it is bound to
// another engine, and reports whether the hold is held for reader.
func (h *holds) bind(id, reader, agent string) bool {
	r, ok := h.reqs[id]
	if !ok || reader == "" {
		return false
	}
	if r.reader != "" && r.reader != reader {
		return false
	}
	r.reader = reader
	if agent != "" {
		if r.readers == nil {
			r.readers = map[string]bool{}
		}
		r.readers[agent] = true
	}
	return true
}

// pin answers one pin of hold key of request id asked by agent of engine
// reader, sent as that agent posted its READs: "" when the rank holds
// exactly that hold and it is not bound to another engine, else why not.
// On "" the hold is bound to reader and no lease expiry releases it before
// until (mono: the rank's monotonic clock); only completions that name it
// do. Decode reports the load done only if its READs ended before the pin
// it asked for ran out, so the hold covered them whatever the wall clocks
// did meanwhile.
func (h *holds) pin(id string, key uint64, reader, agent string, until time.Time) string {
	r, ok := h.reqs[id]
	switch {
	case !ok && h.dropped.has(id):
		return "it dropped the hold: " + h.dropWhy
	case !ok && h.expired.has(id):
		return "its hold expired"
	case !ok:
		return "it holds no such request"
	case r.key == 0 || r.key != key:
		// Other blocks, another deadline (a later hold of the same id) or
		// another staging slot than the Params name.
		return "it holds other blocks for it than the Params name"
	case !h.bind(id, reader, agent):
		return fmt.Sprintf("it holds it for decode engine %q", r.reader)
	case r.from[agent]:
		// A second load by the same agent: its own completion may be
		// the last the hold waits for and release it mid-READ.
		return "it counted this agent's completion already"
	}
	// A completion counted from outside the pinning engine (a vLLM decode
	// read the hold before it was bound) may be one of those the hold
	// waits for: the pin could not keep it.
	for a := range r.from {
		if !r.readers[a] {
			return fmt.Sprintf("it counted a completion from agent %q, which is not decode engine %q's", a, reader)
		}
	}
	if until.After(r.pinUntil) {
		r.pinUntil = until
	}
	return ""
}

// finish starts holding a request's blocks. A request already held is an
// error and changes nothing.
func (h *holds) finish(id string, blocks []int, now time.Time) error {
	if _, ok := h.reqs[id]; ok {
		return invalidf("request %q is already held", id)
	}
	if err := h.leases.Add(id, now); err != nil {
		return invalidf("%v", err)
	}
	h.reqs[id] = &held{blocks: blocks}
	h.expired.remove(id)
	h.dropped.remove(id)
	return nil
}

// expectedFor turns the decode world size in a completion into the number
// of completions this rank receives: each rank is read by decodeTP/tp decode
// ranks when decode has more ranks, else by exactly one.
// In vLLM's protocol (countGiven) the completion says that number itself.
func (h *holds) expectedFor(decodeTP int) int {
	if h.countGiven {
		return max(decodeTP, 1)
	}
	if decodeTP > h.tp {
		return (decodeTP + h.tp - 1) / h.tp
	}
	return 1
}

// complete applies one completion. On completionDone the request is
// released: its lease and entry are gone and the caller frees its blocks.
func (h *holds) complete(c notif.Completion, sender string) (completionOutcome, error) {
	r, ok := h.reqs[c.ID]
	if !ok {
		if h.expired.has(c.ID) {
			return completionLate, fmt.Errorf("completion for request %q after its lease expired", c.ID)
		}
		if h.dropped.has(c.ID) {
			return completionLate, fmt.Errorf("completion for request %q after the rank dropped its hold (%s)", c.ID, h.dropWhy)
		}
		return completionUnknown, fmt.Errorf("completion for unknown request %q", c.ID)
	}
	if c.Seq == 0 && h.keyed {
		return completionPlain, fmt.Errorf("plain completion for request %q from agent %q: this rank's decodes name the hold they read", c.ID, sender)
	}
	if c.Seq != 0 && c.Seq != r.key || c.Seq == 0 && !r.pinUntil.IsZero() {
		// A pinned hold's readers name it in their completions: one for
		// another hold of the id (a late copy) must not release this one
		// while a pinned READ of it may still run. (Only keyed holds are
		// pinned, so a plain one was refused above; this stays in case.)
		return completionStale, fmt.Errorf("completion for request %q from agent %q names another hold of the id", c.ID, sender)
	}
	if r.reader != "" && !r.readers[sender] {
		return completionForeign, fmt.Errorf("completion for request %q from agent %q: the hold is bound to decode engine %q, whose ranks did not name that agent", c.ID, sender, r.reader)
	}
	want := h.expectedFor(c.N)
	if r.expected != 0 && r.expected != want {
		return completionInvalid, fmt.Errorf("completion for request %q says decode TP %d (expect %d completions), earlier ones said %d", c.ID, c.N, want, r.expected)
	}
	if r.from[sender] {
		return completionDuplicate, fmt.Errorf("second completion for request %q from decode agent %q", c.ID, sender)
	}
	if r.from == nil {
		r.from = map[string]bool{}
	}
	r.from[sender] = true
	r.expected = want
	r.got++
	if r.got < r.expected {
		return completionCounted, nil
	}
	delete(h.reqs, c.ID)
	delete(h.overdue, c.ID)
	h.leases.Complete(c.ID)
	return completionDone, nil
}

// heartbeat extends the leases of the held, not aborted ids among ids to at
// least now+by and returns those ids.
func (h *holds) heartbeat(ids []string, now time.Time, by time.Duration) (extended []string) {
	return h.heartbeatFor(ids, "", now, by)
}

// heartbeatFor extends as heartbeat does, but only the holds not bound to
// an engine other than reader ("" : any).
func (h *holds) heartbeatFor(ids []string, reader string, now time.Time, by time.Duration) (extended []string) {
	for _, id := range ids {
		if r, ok := h.reqs[id]; ok && !r.aborted && (reader == "" || r.reader == "" || r.reader == reader) && h.leases.Extend(id, now, by) {
			extended = append(extended, id)
		}
	}
	return extended
}

// abort stops extending id's lease; it reports whether id was held and not
// yet aborted. The lease keeps its deadline: decode was told it.
func (h *holds) abort(id string) bool {
	r, ok := h.reqs[id]
	if !ok || r.aborted {
		return false
	}
	r.aborted = true
	return true
}

// expire releases every request whose lease ran out by now (the rank's
// clock) and whose pins ended by mono (its monotonic clock), and returns
// their ids, each once.
func (h *holds) expire(now, mono time.Time) []string {
	var ids []string
	for d, ok := h.leases.Next(); ok && !d.After(now); d, ok = h.leases.Next() {
		for _, id := range h.leases.Expire(d) {
			if h.reqs[id].pinUntil.After(mono) {
				h.overdue[id] = d
				continue
			}
			ids = append(ids, id)
		}
	}
	for id, d := range h.overdue {
		if !h.reqs[id].pinUntil.After(mono) && !d.After(now) {
			delete(h.overdue, id)
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		delete(h.reqs, id)
		h.expired.add(id)
	}
	return ids
}

// drop releases, for a rank whose engine goes away (why says so), every
// hold no decode rank is reading now: none of its pins lasts past mono.
// With unclaimedFor > 0 it releases only the holds no decode engine asked
// about (unbound) that were made at least unclaimedFor before mono: a
// decode engine reads, or asks about, a hold within moments of its Params,
// so such a hold is for nobody. A later pin of a released id is answered
// with why. It returns the released ids, each once, and how many holds
// stay.
func (h *holds) drop(mono time.Time, unclaimedFor time.Duration, why string) (ids []string, kept int) {
	for id, r := range h.reqs {
		reading := r.pinUntil.After(mono)
		unclaimed := r.reader == "" && len(r.from) == 0 && !r.made.IsZero() && !mono.Before(r.made.Add(unclaimedFor))
		if reading || unclaimedFor > 0 && !unclaimed {
			kept++
			continue
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		delete(h.reqs, id)
		delete(h.overdue, id)
		h.leases.Complete(id)
		h.dropped.add(id)
	}
	if len(ids) > 0 {
		h.dropWhy = why
	}
	return ids, kept
}

// releaseAll releases every held request (on Close) and returns their ids.
func (h *holds) releaseAll() []string {
	ids := make([]string, 0, len(h.reqs))
	for id := range h.reqs {
		h.leases.Complete(id)
		ids = append(ids, id)
	}
	clear(h.reqs)
	clear(h.overdue)
	return ids
}

func (h *holds) len() int { return len(h.reqs) }

// recent remembers the last n ids added, for late-completion accounting in
// bounded memory.
type recent struct {
	ring []string
	next int
	set  map[string]int // id -> copies in ring
}

func newRecent(n int) recent { return recent{ring: make([]string, max(1, n)), set: map[string]int{}} }

func (r *recent) add(id string) {
	if old := r.ring[r.next]; old != "" {
		if r.set[old]--; r.set[old] <= 0 {
			delete(r.set, old)
		}
	}
	r.ring[r.next] = id
	r.set[id]++
	r.next = (r.next + 1) % len(r.ring)
}

func (r *recent) has(id string) bool { return r.set[id] > 0 }

// remove forgets id (it is held again: a new request reused the id). Its
// ring slots stay and are skipped when overwritten.
func (r *recent) remove(id string) {
	if r.set[id] > 0 {
		delete(r.set, id)
		for i, v := range r.ring {
			if v == id {
				r.ring[i] = ""
			}
		}
	}
}
