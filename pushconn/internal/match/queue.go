package match

// due is one deadline in a dueQueue: at on the matcher's timeline, and two
// words that name what is due (an entry's slab slot and generation, or a
// tombstone's fingerprint). b also breaks ties between equal deadlines.
type due struct {
	at   int64
	a, b uint64
}

func (d due) before(e due) bool { return d.at < e.at || (d.at == e.at && d.b < e.b) }

// dueQueue holds deadlines, earliest first, with no pointer for the
// collector. Most deadlines are pushed in order (now plus a fixed TTL, now
// rising): those go to a first-in first-out run, pushed and popped in O(1)
// and read in memory order. A deadline earlier than the run's last (a
// registration received before a handshake, a lease extended to less than
// a later one's) goes to a heap, and the front is the earlier of the two
// fronts. Entries that leave the matcher some other way are not searched
// for: the owner skips them when they reach the front, and compacts the
// queue when they outnumber the live ones (compact), so a queue holds at
// most about twice the entries waiting.
type dueQueue struct {
	run  []due // in order from head
	head int
	heap []due // min-heap by before
}

// len returns the number of deadlines queued, live or not.
func (q *dueQueue) len() int { return len(q.run) - q.head + len(q.heap) }

func (q *dueQueue) push(d due) {
	if n := len(q.run); n == q.head || !d.before(q.run[n-1]) {
		if q.head > 0 && q.head >= n/2 && n == cap(q.run) {
			// Full and at least half popped: slide down rather than grow.
			q.run = q.run[:copy(q.run, q.run[q.head:])]
			q.head = 0
		}
		if len(q.run) == cap(q.run) {
			// Doubling, where append grows a long slice by a quarter:
			// a queue of tombstones grows to millions.
			run := make([]due, len(q.run), max(64, 2*cap(q.run)))
			copy(run, q.run)
			q.run = run
		}
		q.run = append(q.run, d)
		return
	}
	q.heap = append(q.heap, d)
	q.up(len(q.heap) - 1)
}

// front returns the earliest deadline.
func (q *dueQueue) front() (due, bool) {
	r := q.head < len(q.run)
	h := len(q.heap) > 0
	switch {
	case r && h:
		if q.heap[0].before(q.run[q.head]) {
			return q.heap[0], true
		}
		return q.run[q.head], true
	case r:
		return q.run[q.head], true
	case h:
		return q.heap[0], true
	}
	return due{}, false
}

// pop removes the deadline front returned.
func (q *dueQueue) pop() {
	if q.head < len(q.run) && (len(q.heap) == 0 || !q.heap[0].before(q.run[q.head])) {
		q.head++
		if q.head == len(q.run) {
			q.run, q.head = q.run[:0], 0
		}
		return
	}
	n := len(q.heap) - 1
	q.heap[0] = q.heap[n]
	q.heap = q.heap[:n]
	q.down(0)
}

// compact drops the deadlines for which keep is false.
func (q *dueQueue) compact(keep func(due) bool) {
	run := q.run[:0]
	for _, d := range q.run[q.head:] {
		if keep(d) {
			run = append(run, d)
		}
	}
	q.run, q.head = run, 0
	heap := q.heap[:0]
	for _, d := range q.heap {
		if keep(d) {
			heap = append(heap, d)
		}
	}
	q.heap = heap
	for i := len(q.heap)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

func (q *dueQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.heap[i].before(q.heap[p]) {
			return
		}
		q.heap[i], q.heap[p] = q.heap[p], q.heap[i]
		i = p
	}
}

func (q *dueQueue) down(i int) {
	n := len(q.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.heap[r].before(q.heap[l]) {
			m = r
		}
		if !q.heap[m].before(q.heap[i]) {
			return
		}
		q.heap[i], q.heap[m] = q.heap[m], q.heap[i]
		i = m
	}
}
