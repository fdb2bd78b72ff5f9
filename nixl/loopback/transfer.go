package loopback

import (
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/nixl"
)

// transfer is one posting of a request: what to copy between which agent
// instances, and what the fault rules decided for it.
type transfer struct {
	init, target *Agent
	req          *xferReq
	epoch        uint64 // the request's epoch when posted
	op           nixl.XferOp
	local        []nixl.Desc
	remote       []nixl.Desc
	bytes        uint64
	notif        []byte
	hasNotif     bool
	fate         transferFate
	inline       bool // carried out inside PostXferReq (Instant model)
}

// execute carries out a transfer that is due: it copies the bytes, ends the
// request, then sends the notification, so the target never sees the
// notification before the bytes.
//
// The copy is counted on its request (beginCopy, endCopy) and checks the
// request's released flag between descriptor runs, so that once
// ReleaseXferReq returns nothing more is written.
func (f *Fabric) execute(t *transfer) {
	if !t.init.beginCopy(t.req, t.epoch) {
		return // released (cancelled) or its initiator closed
	}
	if !reachable(t.init, t.target) {
		t.init.endCopy(t.req)
		f.failDisconnected(t)
		return
	}
	st, injected, err := f.copyBytes(t)
	t.init.endCopy(t.req)
	if t.req.released.Load() {
		return // released during the copy: it ends nothing and notifies no one
	}
	if st.IsError() {
		f.stats.failed.Add(1)
		if injected {
			f.stats.inFlightFailed.Add(1)
			f.log.Debug("loopback: injected in-flight failure",
				zap.String("from", t.init.name), zap.String("to", t.target.name), zap.Stringer("status", st))
		}
		t.init.finish(t.req, t.epoch, st, err, nil)
		return
	}
	if t.inline || !t.hasNotif {
		if !t.init.finish(t.req, t.epoch, nixl.StatusSuccess, nil, nil) {
			return
		}
		f.stats.completed.Add(1)
		if t.hasNotif {
			f.sendTransferNotif(t.init, t.target, t.notif, t.fate.notif)
		}
		return
	}
	// As with NIXL's UCX backend, the notification of a transfer that did
	// not complete inside PostXferReq goes out when the initiator next sees
	// the transfer done (XferStatus, or ReleaseXferReq).
	held := &heldNotif{target: t.target, msg: t.notif, fate: t.fate.notif}
	if t.init.finish(t.req, t.epoch, nixl.StatusSuccess, nil, held) {
		f.stats.completed.Add(1)
	}
}

// heldNotif is the notification of a completed transfer that waits for its
// initiator to see the completion.
type heldNotif struct {
	target *Agent
	msg    []byte
	fate   notifFate
}

// sendTransferNotif sends a transfer's notification, after its bytes.
func (f *Fabric) sendTransferNotif(from, to *Agent, msg []byte, fate notifFate) {
	f.stats.notifsSent.Add(1)
	if fate.drop {
		f.stats.notifsDropped.Add(1)
		f.log.Debug("loopback: injected notification drop", zap.String("from", from.name), zap.String("to", to.name))
		return
	}
	if fate.delay > 0 {
		f.stats.delayed.Add(1)
	}
	f.sendNotice(notice{from: from, to: to, msg: msg}, f.clock.Now().Add(fate.delay))
}

// copyBytes moves the transfer's bytes, or the first half of them when a
// FailInFlight rule hit it. It checks, under the fabric's memory lock, that
// both sides are still registered: memory deregistered since the request was
// made fails the transfer with StatusBackend, as a stale remote key does on a
// real backend.
func (f *Fabric) copyBytes(t *transfer) (st nixl.Status, injected bool, err error) {
	const op = "loopback.transfer"
	f.memMu.RLock()
	defer f.memMu.RUnlock()
	if i := t.init.regs.coversAll(t.local); i >= 0 {
		return nixl.StatusBackend, false, nixl.NewError(op, nixl.StatusBackend,
			"%v from %q to %q: local descriptor %d [%#x, +%d) is no longer registered", t.op, t.init.name, t.target.name, i, t.local[i].Addr, t.local[i].Len)
	}
	if i := t.target.regs.coversAll(t.remote); i >= 0 {
		return nixl.StatusBackend, false, nixl.NewError(op, nixl.StatusBackend,
			"%v from %q to %q: remote descriptor %d [%#x, +%d) is no longer registered by %q", t.op, t.init.name, t.target.name, i, t.remote[i].Addr, t.remote[i].Len, t.target.name)
	}
	n := len(t.local)
	if t.fate.failInFlight != 0 {
		n /= 2
	}
	var moved uint64
	defer func() { f.stats.bytes.Add(moved) }()
	// Descriptors that continue each other on both sides are copied as one
	// range, as NIXL merges consecutive descriptors: large copies are much
	// faster than many 64 KiB ones.
	for i := 0; i < n; {
		j := i + 1
		for j < n && t.local[j].Addr == t.local[j-1].End() && t.remote[j].Addr == t.remote[j-1].End() {
			j++
		}
		if f.testHookCopy != nil {
			f.testHookCopy()
		}
		if t.req.released.Load() {
			return nixl.StatusBackend, false, nixl.NewError(op, nixl.StatusBackend,
				"%v from %q to %q: released after %d of %d descriptors", t.op, t.init.name, t.target.name, i, len(t.local))
		}
		m, ok := t.copyRun(i, j)
		moved += m
		if !ok {
			// Registered memory that was freed without being deregistered.
			return nixl.StatusBackend, false, nixl.NewError(op, nixl.StatusBackend,
				"%v from %q to %q: descriptors %d to %d: memory was freed while registered", t.op, t.init.name, t.target.name, i, j-1)
		}
		i = j
	}
	if t.fate.failInFlight != 0 {
		return t.fate.failInFlight, true, nixl.NewError(op, t.fate.failInFlight,
			"%v from %q to %q failed in flight after %d of %d descriptors (injected fault)", t.op, t.init.name, t.target.name, n, len(t.local))
	}
	return nixl.StatusSuccess, false, nil
}

// failDisconnected ends a transfer whose initiator or target was cut off.
func (f *Fabric) failDisconnected(t *transfer) {
	err := nixl.NewError("loopback.transfer", nixl.StatusRemoteDisconnect,
		"%v from %q to %q: %s", t.op, t.init.name, t.target.name, disconnectReason(t.init, t.target))
	if t.init.finish(t.req, t.epoch, nixl.StatusRemoteDisconnect, err, nil) {
		f.stats.failed.Add(1)
		f.stats.disconnects.Add(1)
	}
}

// unreachableReason says why a cannot reach target, the agent it knows as
// name (nil when no live agent has that name), or returns "" when it can.
func unreachableReason(a *Agent, name string, target *Agent) string {
	if target == nil {
		return "agent " + quote(name) + " closed"
	}
	if reachable(a, target) {
		return ""
	}
	return disconnectReason(a, target)
}

// disconnectReason says which side of a link is gone.
func disconnectReason(from, to *Agent) string {
	switch {
	case to.closed.Load():
		return "agent " + quote(to.name) + " closed"
	case to.disconnected.Load():
		return "agent " + quote(to.name) + " is disconnected"
	case from.disconnected.Load():
		return "agent " + quote(from.name) + " is disconnected"
	case from.closed.Load():
		return "agent " + quote(from.name) + " closed"
	}
	return "agent " + quote(to.name) + " is gone"
}

// copyRun copies descriptors [i, j), which are contiguous on both sides, in
// one copy when each side lies in one Buffer, else one by one.
func (t *transfer) copyRun(i, j int) (moved uint64, ok bool) {
	n := t.local[j-1].End() - t.local[i].Addr
	l, err1 := nixl.HostBytes(t.local[i].Addr, n)
	r, err2 := nixl.HostBytes(t.remote[i].Addr, n)
	if err1 == nil && err2 == nil {
		t.copy(l, r)
		return n, true
	}
	if j-i == 1 {
		return 0, false
	}
	for k := i; k < j; k++ {
		m, ok := t.copyRun(k, k+1)
		moved += m
		if !ok {
			return moved, false
		}
	}
	return moved, true
}

// copy moves bytes in the transfer's direction between local and remote
// memory.
func (t *transfer) copy(local, remote []byte) {
	if t.op == nixl.Write {
		copy(remote, local)
	} else {
		copy(local, remote)
	}
}
