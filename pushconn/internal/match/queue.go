package match

import (
	"container/heap"
	"time"
)

// expiring is an entry that a deadline queue can hold: it says its deadline
// and whether it already left the matcher some other way.
type expiring interface {
	deadlineAt() time.Time
	isGone() bool
}

// deadlines holds entries by deadline, earliest first. Entries that leave
// the matcher some other way stay until they reach the front and are then
// skipped, which keeps removal O(1) and bounds memory by arrival rate times
// TTL. A heap rather than arrival order, because registrations may enter
// with the time they were received, after later ones.
type deadlines[E expiring] struct {
	h entryHeap[E]
}

func (q *deadlines[E]) push(e E) { heap.Push(&q.h, e) }

// front returns the earliest entry still in the matcher.
func (q *deadlines[E]) front() (E, bool) {
	for len(q.h) > 0 && q.h[0].isGone() {
		heap.Pop(&q.h)
	}
	if len(q.h) == 0 {
		var zero E
		return zero, false
	}
	return q.h[0], true
}

func (q *deadlines[E]) pop() { heap.Pop(&q.h) }

// fix restores the order after deadlines of entries in the queue moved
// (Matcher.Extend); O(n), once per heartbeat message.
func (q *deadlines[E]) fix() { heap.Init(&q.h) }

// next returns the deadline of the earliest live entry.
func (q *deadlines[E]) next() (time.Time, bool) {
	e, ok := q.front()
	if !ok {
		return time.Time{}, false
	}
	return e.deadlineAt(), true
}

type entryHeap[E expiring] []E

func (h entryHeap[E]) Len() int           { return len(h) }
func (h entryHeap[E]) Less(i, j int) bool { return h[i].deadlineAt().Before(h[j].deadlineAt()) }
func (h entryHeap[E]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap[E]) Push(x any)        { *h = append(*h, x.(E)) }
func (h *entryHeap[E]) Pop() any {
	old := *h
	var zero E
	e := old[len(old)-1]
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	return e
}
