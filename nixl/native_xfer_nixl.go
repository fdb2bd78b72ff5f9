//go:build nixl

package nixl

/*
#include <stddef.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
)

// PrepXferDlist prepares descriptors for MakeXferReq
// (nixlAgent::prepXferDlist): remote "" prepares the local side (NIXL's
// NIXL_INIT_AGENT), a peer's name its side, and this agent's own name the
// target side of a transfer within the agent. Release the handle with
// ReleaseDlistHandle (or Close).
func (a *NativeAgent) PrepXferDlist(remote string, descs XferList, opts *Options) (DlistHandle, error) {
	const op = "nixlAgent::prepXferDlist"
	if err := a.enter(op); err != nil {
		return 0, err
	}
	defer a.exit()
	o, err := a.descOptions(op, descs.Mem, opts)
	if err != nil {
		return 0, err
	}
	ptr, s := shimPrepXferDlist(a.agent, remote, descs, o)
	if err := check(op, s, func() string {
		return fmt.Sprintf("%d %s descriptors of %s", len(descs.Descs), descs.Mem, side(remote))
	}); err != nil {
		return 0, err
	}
	return DlistHandle(a.dlists.add(ptr)), nil
}

func side(remote string) string {
	if remote == "" {
		return "the local side"
	}
	return fmt.Sprintf("remote agent %q (metadata loaded and covering them?)", remote)
}

// ReleaseDlistHandle frees a prepared list (nixlAgent::releasedDlistH).
// Requests made from it stay valid. Releasing twice, or a handle of another
// agent, gives ErrInvalidParam.
func (a *NativeAgent) ReleaseDlistHandle(h DlistHandle) error {
	const op = "nixlAgent::releasedDlistH"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	s, found := a.dlists.free(uint64(h), func(ptr uintptr) Status { return shimReleaseDlist(a.agent, ptr) })
	if !found {
		return a.badHandle(op, "prepared list", uint64(h))
	}
	return check(op, s, func() string { return fmt.Sprintf("prepared list %d", h) })
}

func (a *NativeAgent) badHandle(op, kind string, h uint64) error {
	return &Error{Op: op, Status: StatusInvalidParam,
		Msg: fmt.Sprintf("%s handle %d is not live on agent %q (released already, never made, or from another agent)", kind, h, a.name)}
}

// indices converts Go indices to C ints, refusing values that C would
// truncate into a different, valid index.
func indices(op, which string, idx []int) ([]C.int, error) {
	out := make([]C.int, len(idx))
	for i, v := range idx {
		if v < 0 || v > math.MaxInt32 {
			return nil, &Error{Op: op, Status: StatusInvalidParam, Msg: fmt.Sprintf("%s index %d at position %d out of range", which, v, i)}
		}
		out[i] = C.int(v)
	}
	return out, nil
}

// MakeXferReq makes a transfer request pairing entry localIdx[i] of the
// prepared local list with entry remoteIdx[i] of the prepared remote list
// (nixlAgent::makeXferReq). NIXL merges runs of consecutive indices into one
// descriptor unless opts.SkipDescMerge is set; opts.Notif sets the
// notification sent on completion, opts.Backends limits the backends
// considered, opts.CustomParam goes to the backend.
func (a *NativeAgent) MakeXferReq(op XferOp, local DlistHandle, localIdx []int, remote DlistHandle, remoteIdx []int, opts *Options) (XferHandle, error) {
	const name = "nixlAgent::makeXferReq"
	if err := a.enter(name); err != nil {
		return 0, err
	}
	defer a.exit()
	if op != Read && op != Write {
		return 0, &Error{Op: name, Status: StatusInvalidParam, Msg: fmt.Sprintf("unknown operation %d", int32(op))}
	}
	li, err := indices(name, "local", localIdx)
	if err != nil {
		return 0, err
	}
	ri, err := indices(name, "remote", remoteIdx)
	if err != nil {
		return 0, err
	}
	o, err := a.options(name, opts)
	if err != nil {
		return 0, err
	}
	le := a.dlists.acquire(uint64(local))
	if le == nil {
		return 0, a.badHandle(name, "local prepared list", uint64(local))
	}
	defer a.dlists.done(le)
	re := le
	if remote != local {
		if re = a.dlists.acquire(uint64(remote)); re == nil {
			return 0, a.badHandle(name, "remote prepared list", uint64(remote))
		}
		defer a.dlists.done(re)
	}
	ptr, s := shimMakeXferReq(a.agent, op, le.ptr, li, re.ptr, ri, o)
	if err := check(name, s, func() string {
		return fmt.Sprintf("%s of %d local and %d remote indices", op, len(localIdx), len(remoteIdx))
	}); err != nil {
		return 0, err
	}
	return XferHandle(a.xfers.add(ptr)), nil
}

// CreateXferReq makes a transfer request from two descriptor lists of equal
// length, pairing them by position (nixlAgent::createXferReq); remoteAgent
// is the peer, or this agent's own name for a transfer within the agent.
// NIXL does not merge adjacent descriptors here. Options as for MakeXferReq.
func (a *NativeAgent) CreateXferReq(op XferOp, local, remote XferList, remoteAgent string, opts *Options) (XferHandle, error) {
	const name = "nixlAgent::createXferReq"
	if err := a.enter(name); err != nil {
		return 0, err
	}
	defer a.exit()
	o, err := a.createArgs(name, op, local, remote, opts)
	if err != nil {
		return 0, err
	}
	ptr, s := shimCreateXferReq(a.agent, op, local, remote, remoteAgent, o)
	if err := checkCreate(name, s, op, local, remote, remoteAgent); err != nil {
		return 0, err
	}
	return XferHandle(a.xfers.add(ptr)), nil
}

// createArgs checks CreateXferReq's arguments, in this order, before they
// cross into NIXL, and resolves opts.
func (a *NativeAgent) createArgs(name string, op XferOp, local, remote XferList, opts *Options) (*shimOpts, error) {
	if op != Read && op != Write {
		return nil, &Error{Op: name, Status: StatusInvalidParam, Msg: fmt.Sprintf("unknown operation %d", int32(op))}
	}
	if err := checkMem(name, local.Mem); err != nil {
		return nil, err
	}
	if err := checkMem(name, remote.Mem); err != nil {
		return nil, err
	}
	return a.options(name, opts)
}

// checkCreate maps createXferReq's status as CreateXferReq reports it.
func checkCreate(name string, s Status, op XferOp, local, remote XferList, remoteAgent string) error {
	return check(name, s, func() string {
		return fmt.Sprintf("%s of %d %s descriptors to %d %s descriptors of agent %q", op, len(local.Descs), local.Mem, len(remote.Descs), remote.Mem, remoteAgent)
	})
}

// PostXfer is CreateXferReq followed by PostXferReq(h, nil), in one cgo
// crossing (nixlAgent::createXferReq, nixlAgent::postXferReq): the way to
// start a new request (see [XferPoster]). When the post fails the request
// is released in the same crossing (nixlAgent::releaseXferReq) and the
// post's error returned with handle 0; should that release fail too, the
// request stays live, and its handle is returned with both errors for the
// caller to release.
func (a *NativeAgent) PostXfer(op XferOp, local, remote XferList, remoteAgent string, opts *Options) (XferHandle, Status, error) {
	const name = "nixlAgent::createXferReq"
	if err := a.enter(name); err != nil {
		return 0, StatusUnknown, err
	}
	defer a.exit()
	o, err := a.createArgs(name, op, local, remote, opts)
	if err != nil {
		return 0, StatusInvalidParam, err
	}
	ptr, cs, ps, rs := shimCreatePostXferReq(a.agent, op, local, remote, remoteAgent, o)
	if err := checkCreate(name, cs, op, local, remote, remoteAgent); err != nil {
		return 0, cs, err
	}
	var h XferHandle
	if ptr != 0 {
		h = XferHandle(a.xfers.add(ptr))
	}
	if !ps.IsError() {
		return h, ps, nil
	}
	postErr := &Error{Op: "nixlAgent::postXferReq", Status: ps, Msg: fmt.Sprintf("new %s of %d descriptors to agent %q", op, len(local.Descs), remoteAgent)}
	if !rs.IsError() {
		postErr.Msg += " (released)"
		return 0, ps, postErr
	}
	return h, ps, errors.Join(postErr, &Error{Op: "nixlAgent::releaseXferReq", Status: rs,
		Msg: fmt.Sprintf("transfer %d could not be released after its failed post; release it", h)})
}

// EstimateXferCost asks the request's backend how long the transfer should
// take (nixlAgent::estimateXferCost). Backends without a model return
// ErrNotSupported.
func (a *NativeAgent) EstimateXferCost(req XferHandle, opts *Options) (XferCost, error) {
	const op = "nixlAgent::estimateXferCost"
	if err := a.enter(op); err != nil {
		return XferCost{}, err
	}
	defer a.exit()
	o, err := a.options(op, opts)
	if err != nil {
		return XferCost{}, err
	}
	e := a.xfers.acquire(uint64(req))
	if e == nil {
		return XferCost{}, a.badHandle(op, "transfer", uint64(req))
	}
	defer a.xfers.done(e)
	cost, s := shimEstimateXferCost(a.agent, e.ptr, o)
	if err := check(op, s, func() string { return fmt.Sprintf("transfer %d", req) }); err != nil {
		return XferCost{}, err
	}
	return cost, nil
}

// PostXferReq starts (or restarts, once finished) a transfer request
// (nixlAgent::postXferReq). It returns StatusSuccess if the transfer
// completed within the call, else StatusInProgress; poll XferStatus. When
// opts.Notif is set it replaces the notification given at creation, for
// this and later posts; the other fields of opts are ignored, so that a
// creation-time notification is kept unless overridden.
func (a *NativeAgent) PostXferReq(req XferHandle, opts *Options) (Status, error) {
	const op = "nixlAgent::postXferReq"
	if err := a.enter(op); err != nil {
		return StatusUnknown, err
	}
	// No defer: nothing between enter and exit can panic, and this is the
	// hot path of every transfer (see XferStatus).
	e := a.xfers.acquire(uint64(req))
	if e == nil {
		a.exit()
		return StatusInvalidParam, a.badHandle(op, "transfer", uint64(req))
	}
	var s Status
	if opts == nil || opts.Notif == nil {
		s = shimPostXferReqPlain(a.agent, e.ptr)
	} else {
		s = shimPostXferReq(a.agent, e.ptr, &shimOpts{present: true, hasNotif: true, notif: opts.Notif})
	}
	a.xfers.done(e)
	a.exit()
	return s, check(op, s, func() string { return fmt.Sprintf("transfer %d", req) })
}

// XferStatus returns StatusInProgress or StatusSuccess, or the error that
// ended the transfer (nixlAgent::getXferStatus). Without a progress thread
// it also progresses the agent.
func (a *NativeAgent) XferStatus(req XferHandle) (Status, error) {
	const op = "nixlAgent::getXferStatus"
	if err := a.enter(op); err != nil {
		return StatusUnknown, err
	}
	// Unlocked without defer: the calls in between cannot panic, and a
	// poller makes this call in a loop, where the deferred calls showed in
	// the profile (docs/binding.md).
	e := a.xfers.acquire(uint64(req))
	if e == nil {
		a.exit()
		return StatusInvalidParam, a.badHandle(op, "transfer", uint64(req))
	}
	s := shimXferStatus(a.agent, e.ptr)
	a.xfers.done(e)
	a.exit()
	return s, check(op, s, func() string { return fmt.Sprintf("transfer %d", req) })
}

// QueryXferBackend returns the name of the backend NIXL chose for a request
// (nixlAgent::queryXferBackend), for use in Options.Backends.
func (a *NativeAgent) QueryXferBackend(req XferHandle) (string, error) {
	const op = "nixlAgent::queryXferBackend"
	if err := a.enter(op); err != nil {
		return "", err
	}
	defer a.exit()
	e := a.xfers.acquire(uint64(req))
	if e == nil {
		return "", a.badHandle(op, "transfer", uint64(req))
	}
	defer a.xfers.done(e)
	b, s := shimQueryXferBackend(a.agent, e.ptr)
	if err := check(op, s, func() string { return fmt.Sprintf("transfer %d", req) }); err != nil {
		return "", err
	}
	name, ok := a.backendName(b)
	if !ok {
		return "", &Error{Op: op, Status: StatusNotFound, Msg: fmt.Sprintf("transfer %d uses a backend gonixl did not create", req)}
	}
	return name, nil
}

// XferTelemetry returns the telemetry of a completed transfer
// (nixlAgent::getXferTelemetry). Without Config.CaptureTelemetry it fails
// with ErrNoTelemetry; before the transfer completed it fails with the
// transfer's status (StatusInProgress, or its error).
func (a *NativeAgent) XferTelemetry(req XferHandle) (XferTelemetry, error) {
	const op = "nixlAgent::getXferTelemetry"
	if err := a.enter(op); err != nil {
		return XferTelemetry{}, err
	}
	defer a.exit()
	e := a.xfers.acquire(uint64(req))
	if e == nil {
		return XferTelemetry{}, a.badHandle(op, "transfer", uint64(req))
	}
	defer a.xfers.done(e)
	t, s := shimXferTelemetry(a.agent, e.ptr)
	switch {
	case s == StatusSuccess:
		return t, nil
	case s == StatusNoTelemetry:
		return XferTelemetry{}, &Error{Op: op, Status: s, Msg: "telemetry is off; create the agent with Config.CaptureTelemetry"}
	default:
		return XferTelemetry{}, &Error{Op: op, Status: s, Msg: fmt.Sprintf("transfer %d has not completed", req)}
	}
}

// ReleaseXferReqs releases several requests as ReleaseXferReq releases
// each, in order (nixlAgent::releaseXferReq on every one), and sets errs[i]
// to the result for reqs[i]: nil once released, ErrInvalidParam for a
// handle not live on this agent (a repeat within reqs included: released by
// then), ErrRepostActive where the backend could not cancel a transfer in
// flight (that request stays live). Under SyncNone the whole list is one
// cgo crossing; under SyncStrict and SyncRW it is one per request. errs
// must be as long as reqs. The returned error is the call's own: the
// lengths differ (nothing released) or the agent is closed (nothing
// released that was not released before).
func (a *NativeAgent) ReleaseXferReqs(reqs []XferHandle, errs []error) error {
	const op = "nixlAgent::releaseXferReq"
	if err := checkReleaseLists(reqs, errs); err != nil {
		return err
	}
	if err := a.enter(op); err != nil {
		return err
	}
	if !a.serial {
		a.exit()
		// Entries are locked one at a time (handleTable.free): holding
		// several for writing could deadlock against a Poll holding
		// several for reading.
		return releaseEach(a, reqs, errs)
	}
	defer a.exit()
	var ptrBuf [16]uintptr
	var stBuf [16]Status
	var entBuf [16]*handleEntry
	ents := a.xfers.claimXfers(reqs, entBuf[:0])
	ptrs := ptrBuf[:0]
	for i, e := range ents {
		if e == nil {
			errs[i] = a.badHandle(op, "transfer", uint64(reqs[i]))
			continue
		}
		ptrs = append(ptrs, e.ptr)
	}
	sts := stBuf[:0]
	sts = append(sts, make([]Status, len(ptrs))...)
	shimReleaseXferReqs(a.agent, ptrs, sts)
	a.xfers.settleXfers(reqs, ents, sts)
	k := 0
	for i, e := range ents {
		if e == nil {
			continue
		}
		h, s := reqs[i], sts[k]
		k++
		errs[i] = check(op, s, func() string { return fmt.Sprintf("transfer %d could not be cancelled", h) })
	}
	return nil
}

// ReleaseXferReq frees a request, cancelling it if still in flight
// (nixlAgent::releaseXferReq). If the backend cannot cancel it the request
// stays live and ErrRepostActive is returned. Releasing twice, or a handle
// of another agent, gives ErrInvalidParam.
func (a *NativeAgent) ReleaseXferReq(req XferHandle) error {
	const op = "nixlAgent::releaseXferReq"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	s, found := a.xfers.free(uint64(req), func(ptr uintptr) Status { return shimReleaseXferReq(a.agent, ptr) })
	if !found {
		return a.badHandle(op, "transfer", uint64(req))
	}
	return check(op, s, func() string { return fmt.Sprintf("transfer %d could not be cancelled", req) })
}
