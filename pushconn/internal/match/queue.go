package match

import "time"

// expiring is an entry that a deadline queue can hold: it says whether a
// queue slot at deadline at still stands for it (it has not left the
// matcher some other way and its deadline has not moved since), and its
// deadline.
type expiring interface {
	queuedAt(at int64) bool
	deadlineAt() time.Time
}

// deadlines holds entries by deadline, earliest first. Entries that leave
// the matcher some other way stay until they reach the front and are then
// skipped, which keeps removal O(1) and bounds memory by arrival rate times
// TTL. A deadline that moves (Matcher.Extend) is pushed again and its old
// slot skipped the same way. A heap rather than arrival order, because
// registrations may enter with the time they were received, after later
// ones. The heap is typed and
// keeps each deadline (on the matcher's timeline) beside its entry, so that
// ordering is an integer comparison that never reads the entry.
type deadlines[E expiring] struct {
	h []timed[E]
}

type timed[E any] struct {
	at int64
	e  E
}

func (q *deadlines[E]) push(at int64, e E) {
	q.h = append(q.h, timed[E]{at: at, e: e})
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if q.h[i].at >= q.h[p].at {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// front returns the earliest entry still in the matcher and its deadline.
func (q *deadlines[E]) front() (E, int64, bool) {
	for len(q.h) > 0 && !q.h[0].e.queuedAt(q.h[0].at) {
		q.pop()
	}
	if len(q.h) == 0 {
		var zero E
		return zero, 0, false
	}
	return q.h[0].e, q.h[0].at, true
}

// pop removes the front entry.
func (q *deadlines[E]) pop() {
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h[n] = timed[E]{}
	q.h = q.h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.h[r].at < q.h[l].at {
			m = r
		}
		if q.h[m].at >= q.h[i].at {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
}

// next returns the deadline of the earliest live entry.
func (q *deadlines[E]) next() (time.Time, bool) {
	e, _, ok := q.front()
	if !ok {
		return time.Time{}, false
	}
	return e.deadlineAt(), true
}
