package pushconn

import (
	"encoding/binary"
	"hash/maphash"
	"time"
)

// seenCap bounds how many registrations a prefill rank remembers having
// received, at about 110 bytes each with the map's share (measured; 7 MiB
// when full) whatever the id's length.
const seenCap = 1 << 16

// seenRegs remembers the registrations (sender agent, decode incarnation,
// request id, transfer id, sequence number) a prefill rank has received,
// until prefill's registration timeout, so that a copy of one delivered late — after the original was
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
	set  map[uint64]time.Time
	seed maphash.Seed // per rank, so a peer cannot choose colliding ids
}

type seenEntry struct {
	key   uint64
	until time.Time
}

func newSeenRegs(n int) *seenRegs {
	return &seenRegs{ring: make([]seenEntry, 0, n), set: map[uint64]time.Time{}, seed: maphash.MakeSeed()}
}

// key hashes a registration's identity. A collision (about 2^-33 among a
// full ring) would only drop a registration as a copy, which then waits for
// its timeout; it can never make prefill write.
func (s *seenRegs) key(sender, id, transferID string, incarnation, seq uint64) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	var n [8]byte
	for _, v := range []uint64{incarnation, seq} {
		binary.BigEndian.PutUint64(n[:], v)
		h.Write(n[:])
	}
	for _, str := range []string{sender, id, transferID} {
		binary.BigEndian.PutUint64(n[:], uint64(len(str)))
		h.Write(n[:])
		h.WriteString(str)
	}
	return h.Sum64()
}

// check reports whether the registration was received before (and not
// longer ago than its timeout); if not, it remembers it until until.
func (s *seenRegs) check(now time.Time, sender, id, transferID string, incarnation, seq uint64, until time.Time) bool {
	k := s.key(sender, id, transferID, incarnation, seq)
	if s.hasKey(now, k) {
		return true
	}
	s.remember(k, until)
	return false
}

// hasKey reports whether hash k is remembered and not past its time.
func (s *seenRegs) hasKey(now time.Time, k uint64) bool {
	t, ok := s.set[k]
	return ok && now.Before(t)
}

// remember keeps hash k until until (replacing the time it had),
// forgetting the oldest entry when the ring is full.
func (s *seenRegs) remember(k uint64, until time.Time) {
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
}

// has reports whether the key is remembered (and not longer ago than its
// timeout), without remembering it.
func (s *seenRegs) has(now time.Time, sender, id, transferID string, incarnation, seq uint64) bool {
	return s.hasKey(now, s.key(sender, id, transferID, incarnation, seq))
}
