package lease

import (
	"container/heap"
	"fmt"
	"time"
)

// Table holds one deadline per id. It is not safe for concurrent use: its
// owner serialises calls (one goroutine, or a mutex).
type Table struct {
	ttl   time.Duration
	byID  map[string]*entry
	queue deadlines
}

type entry struct {
	id       string
	deadline time.Time
	index    int // position in queue
}

// New returns an empty table whose leases last ttl (> 0).
func New(ttl time.Duration) (*Table, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("lease: ttl must be positive, got %v", ttl)
	}
	return &Table{ttl: ttl, byID: map[string]*entry{}}, nil
}

// TTL returns the lease duration given to New.
func (t *Table) TTL() time.Duration { return t.ttl }

// Add starts a lease for id that ends at now+TTL. Adding an id that is
// already leased is an error and changes nothing.
func (t *Table) Add(id string, now time.Time) error {
	if _, ok := t.byID[id]; ok {
		return fmt.Errorf("lease: %q is already leased", id)
	}
	e := &entry{id: id, deadline: now.Add(t.ttl)}
	t.byID[id] = e
	heap.Push(&t.queue, e)
	return nil
}

// Extend moves id's deadline to now+by if that is later than the current
// one; a lease is never shortened. It reports whether id is leased.
func (t *Table) Extend(id string, now time.Time, by time.Duration) bool {
	e, ok := t.byID[id]
	if !ok {
		return false
	}
	if d := now.Add(by); d.After(e.deadline) {
		e.deadline = d
		heap.Fix(&t.queue, e.index)
	}
	return true
}

// Complete ends id's lease before it expires. It reports whether id was
// leased; completing twice returns false the second time.
func (t *Table) Complete(id string) bool {
	e, ok := t.byID[id]
	if !ok {
		return false
	}
	delete(t.byID, id)
	heap.Remove(&t.queue, e.index)
	return true
}

// Expire removes and returns, earliest deadline first, every id whose
// deadline is at or before now. Each id is returned once: it is no longer in
// the table afterwards.
func (t *Table) Expire(now time.Time) []string {
	var out []string
	for len(t.queue) > 0 && !t.queue[0].deadline.After(now) {
		e := heap.Pop(&t.queue).(*entry)
		delete(t.byID, e.id)
		out = append(out, e.id)
	}
	return out
}

// Deadline returns id's deadline and whether id is leased.
func (t *Table) Deadline(id string) (time.Time, bool) {
	e, ok := t.byID[id]
	if !ok {
		return time.Time{}, false
	}
	return e.deadline, true
}

// Next returns the earliest deadline, if any lease is held, so the owner can
// sleep until then.
func (t *Table) Next() (time.Time, bool) {
	if len(t.queue) == 0 {
		return time.Time{}, false
	}
	return t.queue[0].deadline, true
}

// Len returns the number of leases held.
func (t *Table) Len() int { return len(t.byID) }

// deadlines is a min-heap of entries by deadline.
type deadlines []*entry

func (q deadlines) Len() int           { return len(q) }
func (q deadlines) Less(i, j int) bool { return q[i].deadline.Before(q[j].deadline) }
func (q deadlines) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *deadlines) Push(x any) {
	e := x.(*entry)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *deadlines) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}
