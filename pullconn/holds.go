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
	tp      int // this engine's TP size, for the expected completion count
	leases  *lease.Table
	reqs    map[string]*held
	expired recent
}

type held struct {
	aborted  bool // the engine dropped it: no more extensions
	blocks   []int
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
)

func newHolds(tp int, ttl time.Duration, remember int) (*holds, error) {
	t, err := lease.New(ttl)
	if err != nil {
		return nil, err
	}
	return &holds{tp: tp, leases: t, reqs: map[string]*held{}, expired: newRecent(remember)}, nil
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
	return nil
}

// expectedFor turns the decode world size in a completion into the number
// of completions this rank receives: each rank is read by decodeTP/tp decode
// ranks when decode has more ranks, else by exactly one.
func (h *holds) expectedFor(decodeTP int) int {
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
		return completionUnknown, fmt.Errorf("completion for unknown request %q", c.ID)
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
	h.leases.Complete(c.ID)
	return completionDone, nil
}

// heartbeat extends the leases of the held, not aborted ids among ids to at
// least now+by and returns those ids.
func (h *holds) heartbeat(ids []string, now time.Time, by time.Duration) (extended []string) {
	for _, id := range ids {
		if r, ok := h.reqs[id]; ok && !r.aborted && h.leases.Extend(id, now, by) {
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

// expire releases every request whose lease ran out by now and returns
// their ids, each once.
func (h *holds) expire(now time.Time) []string {
	ids := h.leases.Expire(now)
	for _, id := range ids {
		delete(h.reqs, id)
		h.expired.add(id)
	}
	return ids
}

// releaseAll releases every held request (on Close) and returns their ids.
func (h *holds) releaseAll() []string {
	ids := make([]string, 0, len(h.reqs))
	for id := range h.reqs {
		h.leases.Complete(id)
		ids = append(ids, id)
	}
	clear(h.reqs)
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
