package match

import "time"

// expiring is an entry that a deadline queue can hold: it says its deadline
// and whether it already left the matcher some other way.
type expiring interface {
	deadlineAt() time.Time
	isGone() bool
}

// fifo holds entries in deadline order. Every entry of one queue gets the
// same TTL from a clock that does not go back, so arrival order is deadline
// order and a slice is enough: entries that leave early are skipped lazily.
type fifo[E expiring] struct {
	items []E
	head  int
}

func (q *fifo[E]) push(e E) { q.items = append(q.items, e) }

// front returns the first entry still in the matcher.
func (q *fifo[E]) front() (E, bool) {
	for q.head < len(q.items) && q.items[q.head].isGone() {
		q.pop()
	}
	if q.head == len(q.items) {
		var zero E
		return zero, false
	}
	return q.items[q.head], true
}

func (q *fifo[E]) pop() {
	var zero E
	q.items[q.head] = zero
	q.head++
	// Reuse the slice once the dead prefix is at least half of it.
	if q.head >= 64 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
		q.head = 0
	}
}

// next returns the deadline of the first live entry.
func (q *fifo[E]) next() (time.Time, bool) {
	e, ok := q.front()
	if !ok {
		return time.Time{}, false
	}
	return e.deadlineAt(), true
}
