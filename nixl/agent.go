package nixl

// Agent is the part of a NIXL agent that gonixl's connectors use: memory
// registration, metadata exchange, transfers and notifications. The native
// agent ([NativeAgent]) and the pure-Go loopback agent (nixl/loopback) both
// implement it, and nixl/nixltest checks that they behave alike. It holds no
// cgo types, so fakes are easy to write.
//
// Implementations are safe for concurrent use. After Close every method
// returns an error matching ErrClosed.
type Agent interface {
	// Name returns the agent's name, unique among the agents that talk to it.
	Name() string

	// RegisterMem makes memory available to transfers (nixlAgent::registerMem).
	RegisterMem(descs RegList, opts *Options) error
	// DeregisterMem undoes RegisterMem for exactly the same descriptors
	// (nixlAgent::deregisterMem).
	DeregisterMem(descs RegList, opts *Options) error

	// LocalMD returns this agent's metadata for peers to load (nixlAgent::getLocalMD).
	LocalMD() ([]byte, error)
	// LocalPartialMD returns metadata that covers only descs; with an empty
	// list it carries connection info only (nixlAgent::getLocalPartialMD).
	LocalPartialMD(descs RegList, opts *Options) ([]byte, error)
	// LoadRemoteMD loads a peer's metadata and returns the peer's name
	// (nixlAgent::loadRemoteMD). Loading partial metadata adds to what is known.
	LoadRemoteMD(md []byte) (string, error)
	// InvalidateRemoteMD forgets a peer (nixlAgent::invalidateRemoteMD).
	InvalidateRemoteMD(remote string) error
	// CheckRemoteMD reports whether the peer's metadata is loaded and, when
	// descs is non-empty, covers those descriptors (nixlAgent::checkRemoteMD).
	// A nil error means yes.
	CheckRemoteMD(remote string, descs XferList) error

	// PrepXferDlist prepares descriptors for MakeXferReq
	// (nixlAgent::prepXferDlist). An empty remote prepares the local side.
	PrepXferDlist(remote string, descs XferList, opts *Options) (DlistHandle, error)
	// ReleaseDlistHandle frees a prepared list (nixlAgent::releasedDlistH).
	ReleaseDlistHandle(h DlistHandle) error
	// MakeXferReq makes a request from entries of two prepared lists, pairing
	// localIdx[i] with remoteIdx[i] (nixlAgent::makeXferReq).
	MakeXferReq(op XferOp, local DlistHandle, localIdx []int, remote DlistHandle, remoteIdx []int, opts *Options) (XferHandle, error)
	// CreateXferReq makes a request from two descriptor lists of equal
	// length, pairing them by position (nixlAgent::createXferReq).
	CreateXferReq(op XferOp, local, remote XferList, remoteAgent string, opts *Options) (XferHandle, error)
	// PostXferReq starts a request; opts.Notif, when set, overrides the
	// notification given at creation (nixlAgent::postXferReq). It returns
	// StatusSuccess if the transfer already completed, else StatusInProgress.
	PostXferReq(req XferHandle, opts *Options) (Status, error)
	// XferStatus returns StatusInProgress or StatusSuccess, or the error that
	// ended the transfer (nixlAgent::getXferStatus).
	XferStatus(req XferHandle) (Status, error)
	// ReleaseXferReq frees a request, cancelling it if still in flight
	// (nixlAgent::releaseXferReq). Releasing twice is an error, not a crash.
	ReleaseXferReq(req XferHandle) error

	// GetNotifs returns and removes every notification received so far, by
	// sender (nixlAgent::getNotifs). It also progresses the agent.
	GetNotifs(opts *Options) (Notifs, error)
	// GenNotif sends a notification with no transfer (nixlAgent::genNotif).
	GenNotif(remote string, msg []byte, opts *Options) error

	// Close releases the agent. It is idempotent and safe while other
	// goroutines are inside agent calls.
	Close() error
}

// TelemetryReader is an Agent that reports a completed transfer's own
// timings (nixlAgent::getXferTelemetry): the native agent does; the
// loopback agent does not. It fails with an error matching ErrNoTelemetry
// when the agent captures none (Config.CaptureTelemetry off). The
// connectors read it, where the agent has it, for their transfer and post
// times (docs/metrics.md).
type TelemetryReader interface {
	XferTelemetry(req XferHandle) (XferTelemetry, error)
}
