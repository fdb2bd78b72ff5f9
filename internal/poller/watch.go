package poller

import (
	"errors"

	"github.com/gonixl/gonixl/nixl"
)

// Done receives the end of a watched transfer: StatusSuccess with a nil
// error, or the failure that ended it. It runs on the poller goroutine,
// before the round's notifications are routed, and must not block.
type Done func(req nixl.XferHandle, s nixl.Status, err error)

type watch struct {
	req  nixl.XferHandle
	done Done
}

// Watch makes the poller ask req's status every round, in the same agent
// call as the notifications when the agent is a nixl.BatchPoller, until the
// transfer is no longer in progress; then it calls done once and forgets
// req. Watching a request again replaces its callback. The caller still
// owns req and releases it (after done, or after Unwatch).
func (p *Poller) Watch(req nixl.XferHandle, done Done) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	for i := range p.watches {
		if p.watches[i].req == req {
			p.watches[i].done = done
			return
		}
	}
	p.watches = append(p.watches, watch{req, done})
}

// Unwatch stops watching req without calling its callback, and reports
// whether it was watched. After it returns the callback is not called,
// unless a round already took it.
func (p *Poller) Unwatch(req nixl.XferHandle) bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.take(req) != nil
}

// Watching returns the number of watched transfers.
func (p *Poller) Watching() int {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return len(p.watches)
}

// take removes req's watch and returns its callback, nil if not watched.
// The caller holds wmu.
func (p *Poller) take(req nixl.XferHandle) Done {
	for i, w := range p.watches {
		if w.req == req {
			p.watches = append(p.watches[:i], p.watches[i+1:]...)
			return w.done
		}
	}
	return nil
}

// snapshotWatches copies the watched requests, in the order they were
// watched, into r.reqs, and marks every status in progress so that a
// status the round could not learn never reads as success.
func (p *Poller) snapshotWatches(r *roundState) {
	p.wmu.Lock()
	r.reqs = r.reqs[:0]
	for _, w := range p.watches {
		r.reqs = append(r.reqs, w.req)
	}
	p.wmu.Unlock()
	r.statuses = resize(r.statuses, len(r.reqs))
	for i := range r.statuses {
		r.statuses[i] = nixl.StatusInProgress
	}
}

// finishWatches calls the callback of each watched transfer the round saw
// end, exactly once: a transfer unwatched meanwhile is skipped, and one the
// agent could not be asked about (closed) stays watched.
func (p *Poller) finishWatches(r *roundState) {
	for i, req := range r.reqs {
		s, err := r.statuses[i], r.errs[i]
		if s == nixl.StatusInProgress || errors.Is(err, nixl.ErrClosed) {
			continue
		}
		p.wmu.Lock()
		done := p.take(req)
		p.wmu.Unlock()
		if done != nil {
			done(req, s, err)
		}
	}
}
