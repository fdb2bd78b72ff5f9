package loopback

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"
)

// link is a directed pair of agent instances: the transfers an initiator
// posts to a target share its bandwidth, and the notifications a sender
// sends to a target arrive in order on it.
type link struct{ from, to *Agent }

// notice is a notification on its way.
type notice struct {
	from, to *Agent
	msg      []byte
}

// event is work due at a time: a transfer to carry out or a notice to
// deliver.
type event struct {
	due  time.Time
	seq  uint64 // orders events due at the same time by when they were queued
	xfer *transfer
	note *notice
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*h = old[:len(old)-1]
	return e
}

// queue tracks the notices of one link still waiting in the heap, so a later
// notice never overtakes an earlier one.
type queue struct {
	pending int
	last    time.Time // due time of the newest pending notice
}

// scheduler holds a fabric's pending work, ordered by due time.
type scheduler struct {
	mu     sync.Mutex
	seq    uint64
	events eventHeap
	busy   map[link]time.Time // when each link finishes its queued transfers
	queues map[link]*queue
	n      atomic.Int64 // len(events), read without the lock by idle polls
}

func (s *scheduler) init() {
	s.busy = map[link]time.Time{}
	s.queues = map[link]*queue{}
}

func (s *scheduler) pushLocked(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
	s.n.Store(int64(len(s.events)))
}

// scheduleTransfer queues t to complete per the model m, behind the
// transfers already queued on its link.
func (f *Fabric) scheduleTransfer(t *transfer, m TransferModel) {
	s := &f.sched
	now := f.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := link{t.init, t.target}
	start := now
	if b, ok := s.busy[k]; ok && b.After(start) {
		start = b
	}
	end := start.Add(m.occupancy(t.bytes))
	s.busy[k] = end
	s.pushLocked(event{due: end.Add(m.Latency), xfer: t})
}

// sendNotice delivers a notification at due, or later if an earlier one on
// the same link is still waiting.
func (f *Fabric) sendNotice(n notice, due time.Time) {
	s := &f.sched
	now := f.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := link{n.from, n.to}
	q := s.queues[k]
	if q == nil {
		if !due.After(now) {
			f.deliverLocked(n)
			return
		}
		q = &queue{}
		s.queues[k] = q
	}
	if q.last.After(due) {
		due = q.last
	}
	q.pending++
	q.last = due
	s.pushLocked(event{due: due, note: &n})
}

// deliverLocked puts a notice in its target's inbox. The scheduler's lock
// is held, so deliveries on a link happen in queue order.
func (f *Fabric) deliverLocked(n notice) {
	if !reachable(n.from, n.to) || !n.to.deliver(n.from.name, n.msg) {
		f.stats.notifsLost.Add(1)
		return
	}
	f.stats.notifsDelivered.Add(1)
}

// progress carries out the work that is due: it completes transfers and
// delivers notifications. Every poll of every agent calls it, as every call
// of a NIXL agent without a progress thread progresses its backends.
func (f *Fabric) progress() {
	if f.sched.n.Load() == 0 {
		return
	}
	f.progressMu.Lock()
	defer f.progressMu.Unlock()
	s := &f.sched
	now := f.clock.Now()
	for {
		s.mu.Lock()
		if len(s.events) == 0 || s.events[0].due.After(now) {
			s.mu.Unlock()
			return
		}
		e := heap.Pop(&s.events).(event)
		s.n.Store(int64(len(s.events)))
		if e.note != nil {
			f.deliverLocked(*e.note)
			k := link{e.note.from, e.note.to}
			if q := s.queues[k]; q != nil {
				if q.pending--; q.pending == 0 {
					delete(s.queues, k)
				}
			}
			s.mu.Unlock()
			continue
		}
		s.mu.Unlock()
		f.execute(e.xfer)
	}
}

// purge removes the pending work that involves a, which is closing or
// being disconnected. Notices to or from a are lost. Transfers a initiated
// are dropped when it closes; the others fail with a remote disconnect.
func (f *Fabric) purge(a *Agent, disconnect bool) {
	s := &f.sched
	var failed []*transfer
	s.mu.Lock()
	kept := s.events[:0]
	for _, e := range s.events {
		switch {
		case e.note != nil && (e.note.from == a || e.note.to == a):
			f.stats.notifsLost.Add(1)
		case e.xfer != nil && (e.xfer.init == a || e.xfer.target == a):
			if disconnect || e.xfer.init != a {
				failed = append(failed, e.xfer)
			}
		default:
			kept = append(kept, e)
		}
	}
	clear(s.events[len(kept):])
	s.events = kept
	heap.Init(&s.events)
	s.n.Store(int64(len(s.events)))
	for k := range s.queues {
		if k.from == a || k.to == a {
			delete(s.queues, k)
		}
	}
	for k := range s.busy {
		if k.from == a || k.to == a {
			delete(s.busy, k)
		}
	}
	s.mu.Unlock()
	for _, t := range failed {
		f.failDisconnected(t)
	}
}
