package pullconn

import (
	"strconv"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/stats"
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
	drainUntil time.Time // on the rank's monotonic clock (Consumer.mono)
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

// maxRead is how many read remote requests a rank remembers before it drops
// those whose deadline passed.
const maxRead = 1 << 16

// readGuard keeps a decode rank from loading one remote request twice.
// loading are the remote requests (load.remoteKey) of the rank's live
// loads: two loads of one remote request would each send a completion, and
// the first may let prefill free the blocks the second still reads. read
// are the remote requests (guardKey) this rank read and sent its
// completion for, until their hold's deadline: prefill may free them any
// time after the completion, so loading one again would read freed blocks.
// It is pure state: the Consumer keeps it under its engine-facing lock,
// the simulation drives it as it is.
type readGuard struct {
	loading map[string]string
	read    map[string]time.Time
	// forgotten counts read remote requests forgotten over maxRead before
	// their deadline.
	forgotten *stats.Counter
	// byID keys read by the remote request alone, as decode did before
	// holds had keys: the simulation's legacy rules, never production.
	byID bool
}

func newReadGuard(forgotten *stats.Counter) readGuard {
	return readGuard{loading: map[string]string{}, read: map[string]time.Time{}, forgotten: forgotten}
}

// check refuses request id's load or keep-alive l of a remote request this
// rank is loading already or has read (now on the rank's clock).
func (g *readGuard) check(id string, l *load, now time.Time) error {
	p := &l.p
	if other, ok := g.loading[l.remoteKey()]; ok {
		return invalidf("request %q: remote request %q of engine %q is already loading on this rank (as request %q)", id, p.RemoteRequestID, p.RemoteEngineID, other)
	}
	if until, ok := g.read[g.key(l)]; ok && now.Before(until) {
		return invalidf("request %q: remote request %q of engine %q was already read by this rank, and prefill may have freed its blocks since", id, p.RemoteRequestID, p.RemoteEngineID)
	}
	return nil
}

// start records that l, request id's load, reads its remote request.
func (g *readGuard) start(id string, l *load) { g.loading[l.remoteKey()] = id }

// ended records the end of l: its remote request is no longer loading,
// and, if a completion of it may have reached prefill, read until
// l.readUntil.
func (g *readGuard) ended(l *load, now time.Time) {
	if g.loading[l.remoteKey()] == l.id {
		delete(g.loading, l.remoteKey())
	}
	if !l.completed {
		return
	}
	if len(g.read) >= maxRead {
		for k, until := range g.read {
			if !now.Before(until) {
				delete(g.read, k)
			}
		}
		for k := range g.read {
			if len(g.read) < maxRead {
				break
			}
			// Over the bound with live entries: forget some (a later
			// load of one would lose this guard; counted).
			delete(g.read, k)
			g.forgotten.Inc()
		}
	}
	g.read[g.key(l)] = l.readUntil
}

// key names l's hold in read: a later hold of the same id (another nonce
// and deadline, so another hold key) is other blocks held afresh, which
// this rank may read.
func (g *readGuard) key(l *load) string {
	if g.byID {
		return l.p.RemoteRequestID
	}
	return l.remoteKey() + "\x00" + strconv.FormatUint(l.hold, 16)
}

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
