package nixl

import (
	"errors"
	"fmt"
)

// XferReleaser is implemented by agents that release several transfer
// requests in one call, which for the native agent under SyncNone is one
// cgo crossing instead of one per request. Optional, like BatchPoller;
// callers reach it through the package function ReleaseXferReqs.
type XferReleaser interface {
	// ReleaseXferReqs releases reqs as ReleaseXferReq releases each, in
	// order, and sets errs[i] to the result for reqs[i] (a repeat within
	// reqs finds its handle released already). errs must be as long as
	// reqs. The returned error is the call's own (the lengths differ, the
	// agent is closed), not a request's.
	ReleaseXferReqs(reqs []XferHandle, errs []error) error
}

// ReleaseXferReqs releases every request of reqs on agent, in order, with
// one call when agent is an XferReleaser and one ReleaseXferReq per request
// otherwise, and sets errs[i] to the result for reqs[i]. errs must be as
// long as reqs. The returned error is the call's own: the lengths differ
// (nothing released) or the agent is closed.
func ReleaseXferReqs(agent Agent, reqs []XferHandle, errs []error) error {
	if r, ok := agent.(XferReleaser); ok {
		return r.ReleaseXferReqs(reqs, errs)
	}
	if err := checkReleaseLists(reqs, errs); err != nil {
		return err
	}
	return releaseEach(agent, reqs, errs)
}

// checkReleaseLists is ReleaseXferReqs' check of its arguments.
func checkReleaseLists(reqs []XferHandle, errs []error) error {
	if len(errs) != len(reqs) {
		return &Error{Op: "nixlAgent::releaseXferReq", Status: StatusInvalidParam,
			Msg: fmt.Sprintf("%d error slots for %d requests: errs must be as long as reqs", len(errs), len(reqs))}
	}
	return nil
}

// releaseEach is ReleaseXferReqs as one ReleaseXferReq per request,
// stopping at the first that finds the agent closed.
func releaseEach(agent interface{ ReleaseXferReq(XferHandle) error }, reqs []XferHandle, errs []error) error {
	for i, h := range reqs {
		errs[i] = agent.ReleaseXferReq(h)
		if errors.Is(errs[i], ErrClosed) {
			return errs[i]
		}
	}
	return nil
}
