package loopback

import (
	"sync/atomic"

	"github.com/gonixl/gonixl/nixl"
)

// dlist is a prepared descriptor list.
type dlist struct {
	remote string // "" for the local side
	descs  []nixl.Desc
}

// xferReq is a transfer request. Its epoch counts postings, so that work
// queued for an earlier posting never ends a later one.
type xferReq struct {
	handle   nixl.XferHandle
	op       nixl.XferOp
	remote   string
	gen      uint64 // the peer's generation when the request was made
	local    []nixl.Desc
	rdescs   []nixl.Desc
	bytes    uint64
	notif    []byte
	hasNotif bool

	status   nixl.Status
	err      error
	epoch    uint64
	observed bool       // a remote disconnect was reported (and the peer forgotten)
	held     *heldNotif // notification waiting for the initiator to see success

	// copying counts the executions copying this request's bytes now,
	// guarded by the initiator's mu; ReleaseXferReq waits for it to reach 0.
	copying int
	// released is set, under the initiator's mu, when the request is
	// released or its agent closes; a copy in progress checks it between
	// descriptor runs and stops.
	released atomic.Bool
}

// PrepXferDlist prepares descriptors for MakeXferReq: the local side when
// remote is "", else the named peer's (or the agent's own) memory. Unknown
// peers, memory types other than DRAM, empty lists and descriptors outside
// the known registrations give nixl.ErrNotFound, as in NIXL.
func (a *Agent) PrepXferDlist(remote string, descs nixl.XferList, _ *nixl.Options) (nixl.DlistHandle, error) {
	const op = "PrepXferDlist"
	if err := a.enter(op); err != nil {
		return 0, err
	}
	defer a.leave()
	a.mu.Lock()
	defer a.mu.Unlock()
	if remote != "" {
		p, self, ok := a.remoteLocked(remote)
		if !ok {
			return 0, a.errorf(op, nixl.StatusNotFound, "no metadata loaded for %q", remote)
		}
		if err := a.checkDescsLocked(op, descs, p, self, remote); err != nil {
			return 0, err
		}
	} else if err := a.checkDescsLocked(op, descs, nil, true, ""); err != nil {
		return 0, err
	}
	a.nextHandle++
	h := nixl.DlistHandle(a.nextHandle)
	a.dlists[h] = &dlist{remote: remote, descs: append([]nixl.Desc(nil), descs.Descs...)}
	return h, nil
}

// checkDescsLocked checks a descriptor list against the local registrations
// (self, remote "") or a target's known regions.
func (a *Agent) checkDescsLocked(op string, descs nixl.XferList, p *peer, self bool, remote string) error {
	side := "local"
	if remote != "" {
		side = quote(remote) + "'s"
	}
	if descs.Mem != nixl.DRAM {
		return a.errorf(op, nixl.StatusNotFound, "no backend for %s memory type %v: the loopback agent moves DRAM only", side, descs.Mem)
	}
	if len(descs.Descs) == 0 {
		return a.errorf(op, nixl.StatusNotFound, "the %s descriptor list is empty", side)
	}
	if i := a.remoteCoverLocked(p, self, descs.Descs); i >= 0 {
		d := descs.Descs[i]
		return a.errorf(op, nixl.StatusNotFound, "%s descriptor %d [%#x, +%d) on device %d is not inside registered memory", side, i, d.Addr, d.Len, d.DevID)
	}
	return nil
}

// ReleaseDlistHandle frees a prepared list; an unknown or already released
// handle gives nixl.ErrInvalidParam.
func (a *Agent) ReleaseDlistHandle(h nixl.DlistHandle) error {
	const op = "ReleaseDlistHandle"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.leave()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.dlists[h]; !ok {
		return a.errorf(op, nixl.StatusInvalidParam, "unknown or released descriptor list handle %d", h)
	}
	delete(a.dlists, h)
	return nil
}

// MakeXferReq pairs entries of a local and a remote prepared list. As in
// NIXL, unknown handles, sides swapped, index lists empty or of different
// lengths, indices out of range and entries of different lengths give
// nixl.ErrInvalidParam; a peer forgotten since PrepXferDlist gives
// nixl.ErrNotFound. opts.Notif sets the notification.
func (a *Agent) MakeXferReq(op nixl.XferOp, local nixl.DlistHandle, localIdx []int, remote nixl.DlistHandle, remoteIdx []int, opts *nixl.Options) (nixl.XferHandle, error) {
	const name = "MakeXferReq"
	if err := a.enter(name); err != nil {
		return 0, err
	}
	defer a.leave()
	a.mu.Lock()
	defer a.mu.Unlock()
	l, r := a.dlists[local], a.dlists[remote]
	if l == nil || r == nil {
		return 0, a.errorf(name, nixl.StatusInvalidParam, "unknown or released descriptor list handle (local %d, remote %d)", local, remote)
	}
	if l.remote != "" || r.remote == "" {
		return 0, a.errorf(name, nixl.StatusInvalidParam, "invalid sides: the local list must be prepared with remote \"\", the remote list with a peer's name")
	}
	if len(localIdx) == 0 || len(localIdx) != len(remoteIdx) {
		return 0, a.errorf(name, nixl.StatusInvalidParam, "different or zero numbers of indices: local %d, remote %d", len(localIdx), len(remoteIdx))
	}
	if op != nixl.Read && op != nixl.Write {
		return 0, a.errorf(name, nixl.StatusInvalidParam, "unknown operation %v", op)
	}
	p, self, ok := a.remoteLocked(r.remote)
	if !ok {
		return 0, a.errorf(name, nixl.StatusNotFound, "metadata of %q was invalidated after PrepXferDlist", r.remote)
	}
	if !self && p.conn == 0 {
		return 0, a.errorf(name, nixl.StatusNotFound, "no connection info loaded for %q", r.remote)
	}
	ld := make([]nixl.Desc, len(localIdx))
	rd := make([]nixl.Desc, len(localIdx))
	for i := range localIdx {
		li, ri := localIdx[i], remoteIdx[i]
		if li < 0 || li >= len(l.descs) {
			return 0, a.errorf(name, nixl.StatusInvalidParam, "local index out of range at position %d with value %d (list has %d)", i, li, len(l.descs))
		}
		if ri < 0 || ri >= len(r.descs) {
			return 0, a.errorf(name, nixl.StatusInvalidParam, "remote index out of range at position %d with value %d (list has %d)", i, ri, len(r.descs))
		}
		ld[i], rd[i] = l.descs[li], r.descs[ri]
		if ld[i].Len != rd[i].Len {
			return 0, a.errorf(name, nixl.StatusInvalidParam, "length mismatch at position %d: local index %d has %d bytes, remote index %d has %d", i, li, ld[i].Len, ri, rd[i].Len)
		}
	}
	return a.newReqLocked(op, r.remote, p, ld, rd, opts), nil
}

// CreateXferReq makes a request from two descriptor lists of equal length.
// As in NIXL, lists of different lengths, or entries of different lengths,
// give nixl.ErrInvalidParam; an unknown peer, a memory type other than DRAM,
// empty lists, and descriptors outside the local registrations or the
// peer's known regions give nixl.ErrNotFound. opts.Notif sets the
// notification. The remote may be the agent's own name.
func (a *Agent) CreateXferReq(op nixl.XferOp, local, remote nixl.XferList, remoteAgent string, opts *nixl.Options) (nixl.XferHandle, error) {
	const name = "CreateXferReq"
	if err := a.enter(name); err != nil {
		return 0, err
	}
	defer a.leave()
	if len(local.Descs) != len(remote.Descs) {
		return 0, a.errorf(name, nixl.StatusInvalidParam, "different descriptor list sizes (local %d, remote %d)", len(local.Descs), len(remote.Descs))
	}
	for i := range local.Descs {
		if local.Descs[i].Len != remote.Descs[i].Len {
			return 0, a.errorf(name, nixl.StatusInvalidParam, "length mismatch at index %d: local %d bytes, remote %d", i, local.Descs[i].Len, remote.Descs[i].Len)
		}
	}
	if op != nixl.Read && op != nixl.Write {
		return 0, a.errorf(name, nixl.StatusInvalidParam, "unknown operation %v", op)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p, self, ok := a.remoteLocked(remoteAgent)
	if !ok {
		return 0, a.errorf(name, nixl.StatusNotFound, "no metadata loaded for %q", remoteAgent)
	}
	if err := a.checkDescsLocked(name, local, nil, true, ""); err != nil {
		return 0, err
	}
	if err := a.checkDescsLocked(name, remote, p, self, remoteAgent); err != nil {
		return 0, err
	}
	if !self && p.conn == 0 {
		return 0, a.errorf(name, nixl.StatusNotFound, "no connection info loaded for %q: load its full metadata, or partial metadata made with IncludeConnInfo", remoteAgent)
	}
	return a.newReqLocked(op, remoteAgent, p, append([]nixl.Desc(nil), local.Descs...), append([]nixl.Desc(nil), remote.Descs...), opts), nil
}

func (a *Agent) newReqLocked(op nixl.XferOp, remote string, p *peer, local, rdescs []nixl.Desc, opts *nixl.Options) nixl.XferHandle {
	a.nextHandle++
	req := &xferReq{
		handle: nixl.XferHandle(a.nextHandle),
		op:     op,
		remote: remote,
		local:  local,
		rdescs: rdescs,
		status: nixl.StatusNotPosted,
		err:    a.errorf("XferStatus", nixl.StatusNotPosted, "request was never posted"),
	}
	if p != nil {
		req.gen = p.gen
	}
	for _, d := range local {
		req.bytes += d.Len
	}
	if opts != nil && opts.Notif != nil {
		req.notif, req.hasNotif = append([]byte{}, opts.Notif...), true
	}
	a.reqs[req.handle] = req
	return req.handle
}

// PostXferReq starts a request. With the Instant model the transfer, and
// the sending of its notification, are done when it returns StatusSuccess;
// otherwise it returns StatusInProgress, XferStatus reports the end, and the
// notification goes out when XferStatus (or ReleaseXferReq) first sees the
// transfer done, as with NIXL's UCX backend: an initiator that never polls
// never notifies. opts.Notif, when non-nil, replaces the request's
// notification for this and later posts. Errors, as NIXL's: an unknown handle
// nixl.ErrInvalidParam; a peer forgotten or reloaded since the request was
// made nixl.ErrNotFound; a request still in flight nixl.ErrRepostActive; a
// peer that is disconnected or closed nixl.ErrRemoteDisconnect, after which
// the peer's metadata is forgotten. FailPost rules fail it with their status.
func (a *Agent) PostXferReq(h nixl.XferHandle, opts *nixl.Options) (nixl.Status, error) {
	const op = "PostXferReq"
	if err := a.enter(op); err != nil {
		return nixl.StatusOf(err), err
	}
	defer a.leave()
	a.f.progress()

	req, err := a.lockRequest(op, h)
	if err != nil {
		return nixl.StatusInvalidParam, err
	}
	var conn uint64
	if req.remote != a.name {
		p := a.peers[req.remote]
		if p == nil {
			a.mu.Unlock()
			return nixl.StatusNotFound, a.errorf(op, nixl.StatusNotFound, "metadata of %q was invalidated after the request was made", req.remote)
		}
		if p.gen != req.gen {
			a.mu.Unlock()
			return nixl.StatusNotFound, a.errorf(op, nixl.StatusNotFound, "metadata of %q was reloaded after the request was made; make a new request", req.remote)
		}
		conn = p.conn
	}
	if req.status == nixl.StatusInProgress {
		a.mu.Unlock()
		return nixl.StatusRepostActive, a.errorf(op, nixl.StatusRepostActive, "request %d is still in progress", h)
	}
	// The last posting's notification, if still held, goes out first, as
	// NIXL checks the request before reposting it.
	prev := takeHeldLocked(req)
	if opts != nil && opts.Notif != nil {
		req.notif, req.hasNotif = append([]byte{}, opts.Notif...), true
	}
	target := a
	if req.remote != a.name {
		target = a.f.lookup(req.remote, conn)
	}
	if why := unreachableReason(a, req.remote, target); why != "" {
		err := a.errorf(op, nixl.StatusRemoteDisconnect, "%s; its metadata is now forgotten", why)
		req.status, req.err, req.observed = nixl.StatusRemoteDisconnect, err, true
		a.forgetLocked(req.remote, req.gen)
		a.mu.Unlock()
		a.release(prev)
		a.f.stats.disconnects.Add(1)
		return nixl.StatusRemoteDisconnect, err
	}
	fate := a.f.faults.decideTransfer(a.name, req.remote, req.hasNotif)
	if fate.failPost != 0 {
		err := a.errorf(op, fate.failPost, "%v to %q failed to post (injected fault)", req.op, req.remote)
		req.status, req.err = fate.failPost, err
		a.mu.Unlock()
		a.release(prev)
		a.f.stats.postsFailed.Add(1)
		return fate.failPost, err
	}
	req.epoch++
	req.status, req.err, req.observed, req.held = nixl.StatusInProgress, nil, false, nil
	t := &transfer{
		init: a, target: target, req: req, epoch: req.epoch, op: req.op,
		local: req.local, remote: req.rdescs, bytes: req.bytes,
		notif: req.notif, hasNotif: req.hasNotif, fate: fate,
	}
	a.mu.Unlock()
	a.release(prev)
	a.f.stats.posted.Add(1)

	if !a.model.instant() {
		a.f.scheduleTransfer(t, a.model)
		return nixl.StatusInProgress, nil
	}
	t.inline = true
	a.f.execute(t)
	a.mu.Lock()
	defer a.mu.Unlock()
	if req.epoch == t.epoch && req.status == nixl.StatusSuccess {
		return nixl.StatusSuccess, nil
	}
	// Failed in flight: the failure is reported by XferStatus.
	return nixl.StatusInProgress, nil
}

// XferStatus returns StatusInProgress or StatusSuccess, or the error that
// ended the request. As in NIXL: a request never posted gives
// nixl.ErrNotPosted; one in flight whose peer was invalidated gives
// nixl.ErrNotFound (the transfer itself goes on); the first report of a
// remote disconnect forgets the peer's metadata. An unknown handle gives
// nixl.ErrInvalidParam. It also progresses the fabric.
func (a *Agent) XferStatus(h nixl.XferHandle) (nixl.Status, error) {
	const op = "XferStatus"
	if err := a.enter(op); err != nil {
		return nixl.StatusOf(err), err
	}
	defer a.leave()
	a.f.progress()
	req, err := a.lockRequest(op, h)
	if err != nil {
		return nixl.StatusInvalidParam, err
	}
	if req.status == nixl.StatusSuccess {
		if req.held != nil && req.remote != a.name && a.peers[req.remote] == nil {
			// Not yet seen done, and the peer is forgotten: as NIXL reports
			// a transfer in flight to an invalidated peer.
			a.mu.Unlock()
			return nixl.StatusNotFound, a.errorf(op, nixl.StatusNotFound, "metadata of %q was invalidated during the transfer", req.remote)
		}
		held := takeHeldLocked(req)
		a.mu.Unlock()
		a.release(held)
		return nixl.StatusSuccess, nil
	}
	defer a.mu.Unlock()
	switch req.status {
	case nixl.StatusInProgress:
		if req.remote != a.name && a.peers[req.remote] == nil {
			return nixl.StatusNotFound, a.errorf(op, nixl.StatusNotFound, "metadata of %q was invalidated during the transfer", req.remote)
		}
		return nixl.StatusInProgress, nil
	case nixl.StatusRemoteDisconnect:
		if !req.observed {
			req.observed = true
			a.forgetLocked(req.remote, req.gen)
		}
	}
	return req.status, req.err
}

// ReleaseXferReq frees a request, cancelling it if still in flight: a
// cancelled transfer copies nothing more and sends no notification. A
// completed transfer whose notification was held for XferStatus sends it
// now. An unknown or already released handle gives nixl.ErrInvalidParam.
//
// Once ReleaseXferReq returns, no byte of the request is written any more,
// on either side, whatever the model (instant, scheduled or delayed) and
// whatever the faults (FailInFlight included): a copy that another
// goroutine is carrying out for the request when it is released stops at
// its next descriptor run, and ReleaseXferReq waits for it to stop. So the
// memory of a released request may be handed back to its owner at once.
func (a *Agent) ReleaseXferReq(h nixl.XferHandle) error {
	const op = "ReleaseXferReq"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.leave()
	a.f.progress()
	req, err := a.lockRequest(op, h)
	if err != nil {
		return err
	}
	if req.status == nixl.StatusInProgress {
		a.f.stats.cancelled.Add(1)
	}
	held := takeHeldLocked(req)
	delete(a.reqs, h)
	a.stopCopiesLocked(req)
	a.mu.Unlock()
	a.release(held)
	return nil
}

// stopCopiesLocked marks req released and waits, releasing a.mu meanwhile,
// until no copy of its bytes is in progress.
func (a *Agent) stopCopiesLocked(req *xferReq) {
	req.released.Store(true)
	if req.copying > 0 && a.f.testHookReleaseWait != nil {
		a.f.testHookReleaseWait()
	}
	for req.copying > 0 {
		a.copied.Wait()
	}
}

// lockRequest locks a.mu and returns the live request h, which the caller
// must unlock; for an unknown or released handle it leaves a.mu unlocked
// and returns nixl.ErrInvalidParam.
func (a *Agent) lockRequest(op string, h nixl.XferHandle) (*xferReq, error) {
	a.mu.Lock()
	req := a.reqs[h]
	if req == nil {
		a.mu.Unlock()
		return nil, a.errorf(op, nixl.StatusInvalidParam, "unknown or released request handle %d", h)
	}
	return req, nil
}
