package nixl

import "time"

// ThreadSync is NIXL's thread-safety mode for an agent (nixl_thread_sync_t).
type ThreadSync int32

// Thread-sync modes, with the values of nixl_thread_sync_t.
const (
	SyncNone   ThreadSync = iota // no locking in NIXL (the default)
	SyncStrict                   // one big lock
	SyncRW                       // reader-writer locking
)

// String returns the mode's NIXL name.
func (s ThreadSync) String() string {
	switch s {
	case SyncNone:
		return "NIXL_THREAD_SYNC_NONE"
	case SyncStrict:
		return "NIXL_THREAD_SYNC_STRICT"
	case SyncRW:
		return "NIXL_THREAD_SYNC_RW"
	}
	return "nixl_thread_sync_t(?)"
}

// Config holds every field of nixlAgentConfig. The zero value is NIXL's
// default configuration: zero durations and port mean NIXL's defaults.
type Config struct {
	// ProgressThread runs NIXL's own progress thread (useProgThread). Without
	// it every agent in the process must be progressed by calling GetNotifs
	// or XferStatus, or connection setup and notifications stall.
	ProgressThread bool
	// ListenThread runs NIXL's metadata listener (useListenThread), needed by
	// SendLocalMD / FetchRemoteMD / InvalidateLocalMD on the peer.
	ListenThread bool
	// ListenPort is the listener's TCP port (listenPort); 0 means 8888.
	ListenPort uint16
	// SyncMode is NIXL's thread-safety mode (syncMode). gonixl's own
	// locking makes SyncNone safe for Go callers.
	SyncMode ThreadSync
	// CaptureTelemetry records per-transfer telemetry (captureTelemetry),
	// read with XferTelemetry.
	CaptureTelemetry bool
	// ProgressThreadDelay is the progress thread's sleep (pthrDelay); 0 means none.
	ProgressThreadDelay time.Duration
	// ListenThreadDelay is the listener's sleep (lthrDelay); 0 means 100ms.
	ListenThreadDelay time.Duration
	// EtcdWatchTimeout bounds waits on an etcd metadata server
	// (etcdWatchTimeout); 0 means 5s. NIXL's C API, which the default build
	// uses, cannot set it: there New refuses any other value with
	// ErrNotSupported.
	EtcdWatchTimeout time.Duration
}

// Defaults NIXL applies where a Config field is zero.
const (
	DefaultListenPort        uint16        = 8888
	DefaultListenThreadDelay time.Duration = 100 * time.Millisecond
	DefaultEtcdWatchTimeout  time.Duration = 5 * time.Second
)

// withDefaults returns c with zero fields replaced by NIXL's defaults.
func (c Config) withDefaults() Config {
	if c.ListenPort == 0 {
		c.ListenPort = DefaultListenPort
	}
	if c.ListenThreadDelay == 0 {
		c.ListenThreadDelay = DefaultListenThreadDelay
	}
	if c.EtcdWatchTimeout == 0 {
		c.EtcdWatchTimeout = DefaultEtcdWatchTimeout
	}
	return c
}
