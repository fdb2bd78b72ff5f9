package pushconn

import (
	"encoding/binary"
	"hash/maphash"
	"time"

	"github.com/gonixl/gonixl/pushconn/internal/match"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// cancelledCap bounds how many cancelled registrations a prefill rank
// remembers.
const cancelledCap = 4096

// cancelledReg is a registration decode cancelled before its request
// finished, remembered until its registration timeout would have ended it.
type cancelledReg struct {
	key   match.Key
	until time.Time
}

// cancelledRegs remembers registrations that decode cancelled while they
// waited for their request. They leave the matcher at once, so they never
// take a match from a live registration (a retry of the request); when the
// request finishes and no live registration pairs with it, its blocks are
// freed at once instead of waiting out their lease, when it names the
// cancelled registration (transfer id or exact request id). It is a ring: a
// forgotten entry costs only that lease wait.
type cancelledRegs struct {
	ring  []cancelledReg
	next  int
	byTID map[string]int // live ring entries per transfer id
	byID  map[string]int // and per request id
}

func newCancelledRegs(n int) *cancelledRegs {
	return &cancelledRegs{ring: make([]cancelledReg, 0, n), byTID: map[string]int{}, byID: map[string]int{}}
}

// add remembers a registration with key k cancelled until until,
// forgetting the oldest entry when full.
func (c *cancelledRegs) add(k match.Key, until time.Time) {
	e := cancelledReg{key: k, until: until}
	if len(c.ring) < cap(c.ring) {
		c.ring = append(c.ring, e)
	} else {
		c.drop(c.next)
		c.ring[c.next] = e
		c.next = (c.next + 1) % len(c.ring)
	}
	c.count(k, 1)
}

// take reports whether a finished request with key k names a cancelled
// registration not yet past its timeout — the same transfer id, or the
// same request id unless both carry different transfer ids — and forgets
// every cancelled registration of that request (one per decode rank it was
// sent to). The same id without its suffix does not count: it cannot tell
// the cancelled attempt's request from a retry's (same base id, new
// suffix) whose registration is still on its way, which must be written.
func (c *cancelledRegs) take(k match.Key, now time.Time) bool {
	if c.byID[k.RequestID] == 0 && (k.TransferID == "" || c.byTID[k.TransferID] == 0) {
		return false // the common case: nothing to scan
	}
	var hit match.Key
	found := false
	for _, e := range c.ring {
		if e.key == (match.Key{}) || now.After(e.until) {
			continue
		}
		sameTID := k.TransferID != "" && e.key.TransferID == k.TransferID
		sameID := e.key.RequestID == k.RequestID && !conflicting(e.key, k)
		if sameTID || sameID {
			hit, found = e.key, true
			break
		}
	}
	if !found {
		return false
	}
	for i, e := range c.ring {
		if e.key == hit {
			c.drop(i)
		}
	}
	return true
}

// drop empties ring slot i.
func (c *cancelledRegs) drop(i int) {
	if k := c.ring[i].key; k != (match.Key{}) {
		c.count(k, -1)
		c.ring[i] = cancelledReg{}
	}
}

func (c *cancelledRegs) count(k match.Key, d int) {
	bump := func(m map[string]int, s string) {
		if m[s] += d; m[s] <= 0 {
			delete(m, s)
		}
	}
	if k.TransferID != "" {
		bump(c.byTID, k.TransferID)
	}
	bump(c.byID, k.RequestID)
}

// seqlessEndedCap bounds how many seq-less registrations (and cancels of
// ones never received) a prefill rank remembers: a ring of 64-bit hashes
// with their deadlines, about 110 bytes an entry with the map's share
// whatever the ids and block lists hold (measured), so at most about 7 MiB
// a rank.
const seqlessEndedCap = 1 << 16

// seqlessEnded remembers the registrations without a registration_seq
// (vLLM's decode sends none) that this rank ended without a WRITE and told
// decode so — a PUSH_CANCEL it withdrew them for and acknowledged, or a
// PUSH_FAIL — until prefill's registration timeout. Decode hands such a
// request's blocks back once every rank has answered, so a late copy of the
// registration (the network duplicated or delayed it) must not be admitted:
// it would be written into blocks the engine has reused. Without a seq a
// copy cannot be told from a new registration of the same id, so prefill
// takes a registration for a copy when its sender, request id, transfer id
// and block ids are all the ended one's: a new registration of the id into
// other blocks is admitted. A cancel of a seq-less registration the rank
// never received names no blocks, so it is remembered by sender and ids
// alone and refuses every seq-less registration of them until the timeout.
//
// The matcher's tombstones already drop copies of registrations that were
// written (see match.Matcher.Register); these are the ones it forgets. It is
// a seenRegs ring (seqlessEndedCap entries): the oldest entry goes first,
// and a collision of the 64-bit hashes only refuses a registration, never
// makes prefill write.
type seqlessEnded struct {
	seen *seenRegs
}

func newSeqlessEnded(n int) *seqlessEnded { return &seqlessEnded{seen: newSeenRegs(n)} }

// copyKind is what seqlessEnded found a seq-less registration to be.
type copyKind int

const (
	copyNone           copyKind = iota // nothing remembered: admit it
	copyOfEnded                        // same sender, ids and blocks as one ended without a WRITE
	copyCancelledFirst                 // its cancel came first (and was acknowledged)
)

// key hashes a registration's identity: sender, ids and, unless anyBlocks,
// its block-id lists.
func (e *seqlessEnded) key(sender, id, transferID string, blocks [][]int, anyBlocks bool) uint64 {
	var h maphash.Hash
	h.SetSeed(e.seen.seed)
	var n [8]byte
	put := func(v uint64) {
		binary.BigEndian.PutUint64(n[:], v)
		h.Write(n[:])
	}
	for _, str := range []string{sender, id, transferID} {
		put(uint64(len(str)))
		h.WriteString(str)
	}
	if anyBlocks {
		put(^uint64(0)) // no group count is that large: never a block list's hash
		return h.Sum64()
	}
	put(uint64(len(blocks)))
	for _, g := range blocks {
		put(uint64(len(g)))
		for _, b := range g {
			put(uint64(b))
		}
	}
	return h.Sum64()
}

// ended remembers seq-less registration reg from sender, which the rank
// ended without a WRITE, until until.
func (e *seqlessEnded) ended(sender string, reg *pushwire.Registration, until time.Time) {
	e.seen.remember(e.key(sender, reg.RequestID, reg.TransferID, reg.LocalBlockIDs, false), until)
}

// cancelledUnseen remembers a seq-less cancel from sender of a registration
// the rank holds nothing of, until until.
func (e *seqlessEnded) cancelledUnseen(sender, id, transferID string, until time.Time) {
	e.seen.remember(e.key(sender, id, transferID, nil, true), until)
}

// copyOf says whether seq-less registration reg from sender is a copy of
// one the rank ended, or was cancelled before it arrived.
func (e *seqlessEnded) copyOf(now time.Time, sender string, reg *pushwire.Registration) copyKind {
	switch {
	case e.seen.hasKey(now, e.key(sender, reg.RequestID, reg.TransferID, reg.LocalBlockIDs, false)):
		return copyOfEnded
	case e.seen.hasKey(now, e.key(sender, reg.RequestID, reg.TransferID, nil, true)):
		return copyCancelledFirst
	}
	return copyNone
}
