package pullconn

import (
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/nixl"
)

// waiter is a request registered with KeepAlive.
type waiter struct {
	p     Params
	since time.Time
}

// load is one request on its way through a decode rank.
type load struct {
	id    string
	p     Params
	hold  uint64 // p.holdKey()
	local []int
	// groups are the decode lists of a grouped load (LoadGroups), one
	// per KV-cache group; local then holds them flattened, for the
	// recompute policy's invalid blocks and the "nothing to read" check.
	groups   [][]int
	key      string
	r        *remote
	deadline time.Time
	xfers    []*xfer
	after    []int // prefill ranks to notify with GenNotif once done
	start    time.Time
	// parkedAt is when a traced load began to wait for its engine's
	// handshake (wall clock, for its span).
	parkedAt time.Time
	// completed: its completions went out (READ notifications or
	// GenNotif), so prefill may free the blocks; until readUntil, its
	// hold's deadline, the remote request must not be loaded again.
	completed bool
	readUntil time.Time
	ended     bool
	// slot is the staging slot its staged READs land in, released with
	// its result; slotUsed is how much of it they take.
	slot     *staging.Slot
	slotUsed uint64
	// await, when its Params say RemoteStagingAwait, is its wait for
	// prefill's background gathers (ready.go).
	await *await
	// postErr is a READ of the slot that could not be posted during a
	// scatter: the load fails on its next poll.
	postErr error
	// result is the end of a load that waits in draining for its READs to
	// let go; it is published after.
	result     connector.Result
	drainUntil time.Time // on the rank's monotonic clock (reader.mono)
	// pin is where the load's pin stands, pinSent when it was asked (this
	// process's monotonic clock) and readsEnded when its READs were seen
	// ended; zero until then. Only with a prefill that pins.
	pin        pinState
	pinSent    time.Time
	readsEnded time.Time

	// prefixHits are a grouped load's prefix-hit blocks per group
	// (descriptors.PrefixHits), counted once startLoad takes the load.
	prefixHits []int

	// After a restart of the prefill engine (restart.go): rehandshook, the
	// load was routed to a new handshake once (no second time); retried,
	// its READ failed on a gone agent and it was routed again, to be posted
	// only if the new handshake (retryFrom is the old one) shows another
	// incarnation, failing with retryErr otherwise.
	rehandshook, retried bool
	retryFrom            *pairing
	retryErr             error
}

type xfer struct {
	// scatter, for a staged READ, copies the slot into the blocks once
	// the READ is done.
	scatter       []staging.Seg
	scatterBlocks *staging.BlockCopy
	h             nixl.XferHandle
	rank          int
	start         time.Time
	bytes         uint64
	descs         int
	done          bool
	// postTimed: the rank timed its post on its own clock (NIXL's
	// telemetry did not yet, or cannot).
	postTimed bool
	// part: one chunk of a rank's staged READ cut into several, but not
	// its last; the last carries the rank's bytes and descriptors, so that
	// the rank's READ counts once. scattered: its scatter ran (a chunk is
	// scattered as soon as it is read).
	part, scattered bool
	// pending: a READ of prefill's slot not posted yet, waiting for its
	// rank to have gathered need regions; local and remote are its lists
	// until then.
	pending       bool
	need          int
	local, remote nixl.XferList
}

type handshakeDone struct {
	r   *remote
	set *pairing
	err error
}

func (l *load) allDone() bool {
	for _, x := range l.xfers {
		if !x.done {
			return false
		}
	}
	return true
}

// remoteKey names the load's remote request: its engine's key and the
// remote request id.
func (l *load) remoteKey() string { return l.key + "\x00" + l.p.RemoteRequestID }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
