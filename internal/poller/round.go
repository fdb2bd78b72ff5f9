package poller

import (
	"errors"
	"sync"

	"github.com/gonixl/gonixl/nixl"
)

// roundState is what Round reuses between rounds, so that a round with
// nothing to report allocates nothing: the inbox a batch-polling agent
// appends to, and the request and status lists of the watched transfers.
type roundState struct {
	mu       sync.Mutex
	inbox    nixl.Notifs
	reqs     []nixl.XferHandle
	statuses []nixl.Status
	errs     []error
	senders  []string
}

// pollAgent makes the round's agent calls: the status of each request in
// r.reqs into r.statuses (and, when polled one by one, r.errs), and the
// notifications, returned. The error is the notifications' (or, batched,
// the call's) error.
func (p *Poller) pollAgent(r *roundState) (nixl.Notifs, error) {
	r.errs = resize(r.errs, len(r.reqs))
	clear(r.errs)
	if bp, ok := p.agent.(nixl.BatchPoller); ok {
		if r.inbox == nil {
			r.inbox = nixl.Notifs{}
		}
		err := bp.Poll(r.reqs, r.statuses, r.inbox)
		if err == nil || len(r.reqs) == 0 || !errors.Is(err, nixl.ErrInvalidParam) {
			for i, s := range r.statuses {
				r.errs[i] = statusError(s)
			}
			return r.inbox, err
		}
		// A handle Poll refused (released behind the poller's back):
		// nothing was polled, so poll one by one to end that request alone.
	}
	for i, req := range r.reqs {
		r.statuses[i], r.errs[i] = p.agent.XferStatus(req)
	}
	notifs, err := p.agent.GetNotifs(nil)
	if r.inbox == nil {
		return notifs, err
	}
	// Batched but refused: keep whatever the refused call had appended.
	for sender, msgs := range notifs {
		r.inbox[sender] = append(r.inbox[sender], msgs...)
	}
	return r.inbox, err
}

// statusError is the error XferStatus pairs with a status.
func statusError(s nixl.Status) error {
	if !s.IsError() {
		return nil
	}
	return nixl.NewError("nixlAgent::getXferStatus", s, "transfer failed")
}

// clearInbox empties the reused inbox while keeping its lists' storage.
// The messages themselves were handed to handlers and are not reused.
func (r *roundState) clearInbox() {
	for k, msgs := range r.inbox {
		clear(msgs)
		r.inbox[k] = msgs[:0]
	}
	if len(r.inbox) > maxInboxSenders {
		clear(r.inbox) // senders come and go: do not keep every one ever seen
	}
}

// maxInboxSenders bounds the senders the reused inbox remembers.
const maxInboxSenders = 64

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
