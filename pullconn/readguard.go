package pullconn

import (
	"strconv"
	"time"

	"github.com/gonixl/gonixl/internal/stats"
)

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
