package nixl

// BatchPoller is implemented by agents that poll several transfers and
// fetch notifications in one call, which for the native agent is one cgo
// crossing instead of one per request plus one for the notifications (the
// batches-through-one-call style of confluent-kafka-go). It is optional:
// pollers check for it with a type assertion and fall back to XferStatus
// and GetNotifs.
type BatchPoller interface {
	// Poll sets statuses[i] to the status of reqs[i], as XferStatus
	// returns it (StatusInProgress, StatusSuccess, or the failure that
	// ended the transfer: a failed transfer is a status here, not an
	// error), then, when notifs is not nil, appends every pending
	// notification to it as AppendNotifs does. statuses must be exactly as
	// long as reqs. The error reports a failure of the call itself: the
	// agent closed, a request handle not live on this agent (then no
	// status is written and nothing is polled), or fetching notifications
	// failed (the statuses are then valid).
	Poll(reqs []XferHandle, statuses []Status, notifs Notifs) error
}

// NotifPoller is implemented by agents that can also hand the
// notifications of a polling round to a function, one call per message,
// rather than append them to a map: a receiver that routes messages as
// they come (a counter, a dispatcher keyed by message) then does no map
// work per delivery. It is optional, like BatchPoller.
type NotifPoller interface {
	// PollEach is Poll, with every pending notification passed to each,
	// in the order Poll would append it (a sender's messages in the order
	// sent), instead of appended to a map; a nil each fetches no
	// notifications. msg is the caller's to keep: it aliases no other
	// message and no memory of the agent. each runs while the agent is
	// held, so it must not call the agent. A panic in each is propagated
	// after the agent is released; the messages of that round after it
	// are lost.
	PollEach(reqs []XferHandle, statuses []Status, each func(from string, msg []byte)) error
}

// XferPoster is implemented by agents that create and post a request in
// one call, which for the native agent is one cgo crossing instead of two,
// and which releases the request when the post fails, as callers of
// CreateXferReq and PostXferReq do. Optional, like BatchPoller.
type XferPoster interface {
	// PostXfer is CreateXferReq(op, local, remote, remoteAgent, opts)
	// followed by PostXferReq(h, nil), returning the handle and the post's
	// status (StatusSuccess or StatusInProgress). A failed creation is
	// CreateXferReq's error with handle 0; a failed post is released and
	// its error returned with handle 0, unless the release failed too:
	// then the live handle comes with both errors.
	PostXfer(op XferOp, local, remote XferList, remoteAgent string, opts *Options) (XferHandle, Status, error)
}

// pollOp names Poll in errors: the NIXL calls it makes.
const pollOp = "Poll (nixlAgent::getXferStatus, nixlAgent::getNotifs)"
