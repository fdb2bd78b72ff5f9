//go:build nixl

package nixl

import "fmt"

var (
	_ BatchPoller  = (*NativeAgent)(nil)
	_ NotifPoller  = (*NativeAgent)(nil)
	_ XferReleaser = (*NativeAgent)(nil)
	_ XferPoster   = (*NativeAgent)(nil)
)

// pollStackReqs is how many requests Poll resolves without allocating.
const pollStackReqs = 4

// Poll is one polling round in one cgo crossing: nixlAgent::getXferStatus
// for each request in order, its result in statuses[i], then, when notifs
// is not nil, nixlAgent::getNotifs with its messages appended to notifs (a
// poller reuses one map, truncating its lists, to receive without
// allocating a map per round). It makes the same NIXL calls, in the same
// order, as XferStatus on each request followed by AppendNotifs, and
// progresses the agent as they do. See [BatchPoller] for what is a status
// and what is an error; with an empty reqs and a nil notifs it does nothing.
func (a *NativeAgent) Poll(reqs []XferHandle, statuses []Status, notifs Notifs) error {
	return a.poll(reqs, statuses, notifs, nil)
}

// PollEach is Poll handing each notification to each instead of a map
// (see [NotifPoller]): one cgo crossing for nixlAgent::getXferStatus on
// every request and, when each is not nil, nixlAgent::getNotifs, whose
// messages are copied out of C memory into small shared blocks, so that a
// round costs no Go allocation of its own.
func (a *NativeAgent) PollEach(reqs []XferHandle, statuses []Status, each func(from string, msg []byte)) error {
	return a.poll(reqs, statuses, nil, each)
}

// poll is Poll (notifs) or PollEach (each); at most one of them is set.
func (a *NativeAgent) poll(reqs []XferHandle, statuses []Status, notifs Notifs, each func(string, []byte)) error {
	if len(statuses) != len(reqs) {
		return &Error{Op: "nixlAgent::getXferStatus", Status: StatusInvalidParam,
			Msg: fmt.Sprintf("Poll got %d statuses for %d requests; pass one status per request", len(statuses), len(reqs))}
	}
	if len(reqs) == 0 {
		if notifs == nil && each == nil {
			return nil
		}
		return a.pollNotifs(notifs, each)
	}
	if err := a.enter(pollOp); err != nil {
		return err
	}
	defer a.exit()
	// The work is split so that each function has few returns per defer:
	// Go open-codes such defers, and this is the polling hot path.
	var ptrStack [pollStackReqs]uintptr
	var heldStack [pollStackReqs]*handleEntry
	ptrs, held, err := a.acquireXfers(reqs, ptrStack[:0], heldStack[:0])
	if err != nil {
		return err
	}
	return a.pollHeld(ptrs, held, statuses, notifs, each)
}

// acquireXfers resolves reqs to their C pointers, holding each entry (see
// handleTable) in held, which the caller releases with releaseXfers. On a
// handle that is not live it releases what it held and fails.
func (a *NativeAgent) acquireXfers(reqs []XferHandle, ptrs []uintptr, held []*handleEntry) ([]uintptr, []*handleEntry, error) {
	for i, h := range reqs {
		if j := a.earlier(reqs[:i], h); j >= 0 {
			ptrs = append(ptrs, ptrs[j])
			continue
		}
		e := a.xfers.acquire(uint64(h))
		if e == nil {
			a.releaseXfers(held)
			return nil, nil, &Error{Op: "nixlAgent::getXferStatus", Status: StatusInvalidParam,
				Msg: fmt.Sprintf("request %d of %d: transfer handle %d is not live on agent %q (released already, never made, or from another agent); nothing was polled", i, len(reqs), h, a.name)}
		}
		held = append(held, e)
		ptrs = append(ptrs, e.ptr)
	}
	return ptrs, held, nil
}

func (a *NativeAgent) releaseXfers(held []*handleEntry) {
	for _, e := range held {
		a.xfers.done(e)
	}
}

// pollHeld makes Poll's NIXL calls on requests already resolved and held,
// and releases them.
func (a *NativeAgent) pollHeld(ptrs []uintptr, held []*handleEntry, statuses []Status, notifs Notifs, each func(string, []byte)) error {
	defer a.releaseXfers(held)
	if notifs == nil && each == nil {
		shimPoll(a.agent, ptrs, statuses, false, nil)
		return nil
	}
	// One notification poller at a time: the scratch buffer and decoder
	// are shared (under SyncNone enter has serialised the call already).
	if !a.serial {
		a.notifMu.Lock()
		defer a.notifMu.Unlock()
	}
	c, s := shimPoll(a.agent, ptrs, statuses, true, &a.scratch)
	return a.deliver(notifs, each, c, s)
}

// pollNotifs is poll without requests, a receiver's round: getNotifs
// alone, with nothing to resolve or hold.
func (a *NativeAgent) pollNotifs(notifs Notifs, each func(string, []byte)) error {
	if err := a.enter(pollOp); err != nil {
		return err
	}
	defer a.exit()
	if !a.serial {
		a.notifMu.Lock()
		defer a.notifMu.Unlock()
	}
	c, s := shimPoll(a.agent, nil, nil, true, &a.scratch)
	return a.deliver(notifs, each, c, s)
}

// deliver hands a round's notifications to notifs or each and frees
// their C memory.
func (a *NativeAgent) deliver(notifs Notifs, each func(string, []byte), c cNotifs, s Status) error {
	const op = "nixlAgent::getNotifs"
	if each == nil {
		_, err := a.takeNotifs(op, notifs, c, s)
		return err
	}
	// each may panic: the deferred calls (here and in the callers) free
	// the C block and release the agent on the way out.
	defer c.release()
	eachNotif(c.refs, &a.dec, each)
	return check(op, s, func() string { return fmt.Sprintf("agent %q", a.name) })
}

// earlier returns the position of h in prev, or -1. A handle listed twice
// must be acquired once: a second read lock on its entry could wait behind
// a pending ReleaseXferReq that itself waits for the first. Under SyncNone
// nothing is locked, so it does not look.
func (a *NativeAgent) earlier(prev []XferHandle, h XferHandle) int {
	if a.serial {
		return -1
	}
	for i, p := range prev {
		if p == h {
			return i
		}
	}
	return -1
}
