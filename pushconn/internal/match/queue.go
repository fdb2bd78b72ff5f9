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
//
// The run is a list of fixed blocks, not one slice: a queue of tombstones
// holds millions of deadlines, and a slice would copy them all each time it
// grew and leave the old array to the collector. A block emptied at the
// front is kept for the next one needed at the back.
type dueQueue struct {
	blocks     []*dueBlock // the run, oldest first
	head, tail int         // next to pop in blocks[0], next to fill in the last block
	spare      *dueBlock
	heap       []due // min-heap by before
}

const dueBlockLen = 1024

type dueBlock [dueBlockLen]due

// len returns the number of deadlines queued, live or not.
func (q *dueQueue) len() int { return q.runLen() + len(q.heap) }

func (q *dueQueue) runLen() int {
	if len(q.blocks) == 0 {
		return 0
	}
	return (len(q.blocks)-1)*dueBlockLen + q.tail - q.head
}

func (q *dueQueue) push(d due) {
	if n := len(q.blocks); q.runLen() > 0 && d.before(q.blocks[n-1][q.tail-1]) {
		q.heap = append(q.heap, d)
		q.up(len(q.heap) - 1)
		return
	}
	q.pushRun(d)
}

func (q *dueQueue) pushRun(d due) {
	if len(q.blocks) == 0 || q.tail == dueBlockLen {
		b := q.spare
		if b == nil {
			b = new(dueBlock)
		}
		q.spare = nil
		q.blocks = append(q.blocks, b)
		q.tail = 0
	}
	q.blocks[len(q.blocks)-1][q.tail] = d
	q.tail++
}

// front returns the earliest deadline.
func (q *dueQueue) front() (due, bool) {
	r := q.runLen() > 0
	h := len(q.heap) > 0
	switch {
	case r && h:
		if q.heap[0].before(q.blocks[0][q.head]) {
			return q.heap[0], true
		}
		return q.blocks[0][q.head], true
	case r:
		return q.blocks[0][q.head], true
	case h:
		return q.heap[0], true
	}
	return due{}, false
}

// pop removes the deadline front returned.
func (q *dueQueue) pop() {
	if q.runLen() > 0 && (len(q.heap) == 0 || !q.heap[0].before(q.blocks[0][q.head])) {
		q.head++
		switch {
		case len(q.blocks) == 1 && q.head == q.tail:
			q.head, q.tail = 0, 0 // empty: refill the block from its start
		case q.head == dueBlockLen:
			q.spare = q.blocks[0]
			q.blocks = q.blocks[:copy(q.blocks, q.blocks[1:])]
			q.head = 0
		}
		return
	}
	n := len(q.heap) - 1
	q.heap[0] = q.heap[n]
	q.heap = q.heap[:n]
	q.down(0)
}

// compact drops the deadlines for which keep is false, in place: the run
// is filtered into its own blocks from the first one's start.
func (q *dueQueue) compact(keep func(due) bool) {
	wb, wo := 0, 0 // next to write: block, offset
	for i, b := range q.blocks {
		from, to := 0, dueBlockLen
		if i == 0 {
			from = q.head
		}
		if i == len(q.blocks)-1 {
			to = q.tail
		}
		for _, d := range b[from:to] {
			if !keep(d) {
				continue
			}
			q.blocks[wb][wo] = d
			if wo++; wo == dueBlockLen {
				wb, wo = wb+1, 0
			}
		}
	}
	if len(q.blocks) > 0 {
		if wo == 0 && wb > 0 {
			wb, wo = wb-1, dueBlockLen // end on a full block rather than an empty one
		}
		if wb+1 < len(q.blocks) {
			q.spare = q.blocks[wb+1]
		}
		clear(q.blocks[wb+1:])
		q.blocks, q.head, q.tail = q.blocks[:wb+1], 0, wo
		if wo == 0 {
			q.blocks, q.tail = q.blocks[:0], 0
		}
	}
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
