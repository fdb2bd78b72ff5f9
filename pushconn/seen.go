package pushconn

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// seenCap bounds how many registrations a prefill rank remembers having
// received, at 40 bytes each whatever the id's length.
const seenCap = 1 << 16

// seenRegs remembers the registrations (sender agent, decode incarnation,
// request id, transfer id, sequence number) a prefill rank has received, until prefill's registration
// timeout, so that a copy of one delivered late — after the original was
// written, failed or cancelled and decode handed its blocks back — is
// dropped instead of waiting in the matcher, where a retry of the request
// (same base id, new suffix) could pair with it and WRITE into the released
// blocks. The matcher itself only knows the registrations still pending.
// Registrations without a sequence number (vLLM's) cannot be told from a
// new registration of the same id and are not remembered. It is a ring:
// the oldest entry goes first when full.
type seenRegs struct {
	ring []seenEntry
	next int
	set  map[[sha256.Size / 2]byte]time.Time
}

type seenEntry struct {
	key   [sha256.Size / 2]byte
	until time.Time
}

func newSeenRegs(n int) *seenRegs {
	return &seenRegs{ring: make([]seenEntry, 0, n), set: map[[sha256.Size / 2]byte]time.Time{}}
}

func seenKey(sender, id, transferID string, incarnation, seq uint64) (k [sha256.Size / 2]byte) {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], incarnation)
	h.Write(n[:])
	for _, s := range []string{sender, id, transferID} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	binary.BigEndian.PutUint64(n[:], seq)
	h.Write(n[:])
	copy(k[:], h.Sum(nil))
	return k
}

// check reports whether the registration was received before (and not
// longer ago than its timeout); if not, it remembers it until until.
func (s *seenRegs) check(now time.Time, sender, id, transferID string, incarnation, seq uint64, until time.Time) bool {
	k := seenKey(sender, id, transferID, incarnation, seq)
	if t, ok := s.set[k]; ok && now.Before(t) {
		return true
	}
	e := seenEntry{key: k, until: until}
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, e)
	} else {
		old := s.ring[s.next]
		if t, ok := s.set[old.key]; ok && t.Equal(old.until) {
			delete(s.set, old.key)
		}
		s.ring[s.next] = e
		s.next = (s.next + 1) % len(s.ring)
	}
	s.set[k] = until
	return false
}
