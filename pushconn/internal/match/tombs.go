package match

import (
	"encoding/binary"
	"hash/maphash"
)

// tombs remembers the registrations paired within the registration TTL, so
// that a duplicate of one (the same sender, request id and transfer id) is
// dropped rather than paired again. There are as many as registrations
// arrive in a TTL (480 s by default), far more than wait at any time, so
// they are kept without a pointer for the collector to trace and without an
// allocation each: by a keyed fingerprint of their identity, in an
// open-addressing table of plain slots (as table, with the tombstone in the
// slot: a registration's look-up and the tombstone its pairing leaves touch
// the same cache line) and a dueQueue of their deadlines. Two identities
// share a fingerprint with a chance of about n/2^127 for n tombstones; a
// registration so taken for a duplicate is dropped and ends at decode's
// registration watchdog, as a lost one does.
type tombs struct {
	slots []tomb
	n     int
	q     dueQueue
}

// fingerprint is 128 bits of keyed hash; fp[1] is never 0, which marks an
// empty tomb slot.
type fingerprint [2]uint64

type tomb struct {
	fp  fingerprint
	seq uint64
	at  int64 // deadline on the matcher's timeline
}

var fpSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// fingerprintOf hashes the identity's fields, the first two preceded by
// their length so that no two identities write the same bytes. An identity
// that fits (almost all: ids are tens of bytes) is laid out on the stack and
// hashed in one call per seed, four times faster than maphash.Hash's
// buffered writes, which take the rest.
func fingerprintOf(id identity) fingerprint {
	var buf [192]byte
	var fp fingerprint
	if len(id.sender)+len(id.key.RequestID)+len(id.key.TransferID)+2*binary.MaxVarintLen64 <= len(buf) {
		n := binary.PutUvarint(buf[:], uint64(len(id.sender)))
		n += copy(buf[n:], id.sender)
		n += binary.PutUvarint(buf[n:], uint64(len(id.key.RequestID)))
		n += copy(buf[n:], id.key.RequestID)
		n += copy(buf[n:], id.key.TransferID)
		fp = fingerprint{maphash.Bytes(fpSeeds[0], buf[:n]), maphash.Bytes(fpSeeds[1], buf[:n])}
	} else {
		fp = fingerprintSlow(id)
	}
	fp[1] |= 1
	return fp
}

// fingerprintSlow is fingerprintOf for identities of any length: the same
// bytes through maphash.Hash, which gives what maphash.Bytes gives.
func fingerprintSlow(id identity) fingerprint {
	var fp fingerprint
	for i, seed := range fpSeeds {
		var h maphash.Hash
		h.SetSeed(seed)
		var l [binary.MaxVarintLen64]byte
		h.Write(l[:binary.PutUvarint(l[:], uint64(len(id.sender)))])
		h.WriteString(id.sender)
		h.Write(l[:binary.PutUvarint(l[:], uint64(len(id.key.RequestID)))])
		h.WriteString(id.key.RequestID)
		h.WriteString(id.key.TransferID)
		fp[i] = h.Sum64()
	}
	return fp
}

// touch reads the first slot that fp's look-up will read and returns a
// word of it, which the caller keeps: the load is issued now, and its
// cache miss (the table holds a tombstone per registration paired in a
// TTL, far more than the caches do) overlaps the work done before get.
func (t *tombs) touch(fp fingerprint) uint64 {
	if len(t.slots) == 0 {
		return 0
	}
	return t.slots[fp[0]&uint64(len(t.slots)-1)].fp[1]
}

// find returns fp's slot, or false and the empty slot that ends its probe.
func (t *tombs) find(fp fingerprint) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := fp[0] & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.fp == fp {
			return int(i), true
		}
		if s.fp[1] == 0 {
			return int(i), false
		}
	}
}

// get returns fp's tombstone. touched is what touch returned, so that the
// compiler keeps that load; a slot that touch found empty ends the probe.
func (t *tombs) get(fp fingerprint, touched uint64) (tomb, bool) {
	if touched == 0 {
		return tomb{}, false
	}
	i, ok := t.find(fp)
	if !ok {
		return tomb{}, false
	}
	return t.slots[i], true
}

func (t *tombs) remove(fp fingerprint) {
	if i, ok := t.find(fp); ok {
		t.removeAt(i)
	}
}

// put leaves a tombstone for fp until at, replacing any earlier one.
func (t *tombs) put(fp fingerprint, seq uint64, at int64) {
	i, ok := t.find(fp)
	if !ok {
		if 2*(t.n+1) > len(t.slots) {
			t.grow()
			i, _ = t.find(fp)
		}
		t.n++
	}
	t.slots[i] = tomb{fp: fp, seq: seq, at: at}
	t.q.push(due{at: at, a: fp[0], b: fp[1]})
}

func (t *tombs) grow() {
	old := t.slots
	size := 2 * len(old)
	if size < minSlots {
		size = minSlots
	}
	t.slots = make([]tomb, size)
	mask := uint64(size - 1)
	for _, s := range old {
		if s.fp[1] == 0 {
			continue
		}
		i := s.fp[0] & mask
		for t.slots[i].fp[1] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// removeAt is table.removeAt for tomb slots.
func (t *tombs) removeAt(i int) {
	mask := uint64(len(t.slots) - 1)
	hole := uint64(i)
	for j := (hole + 1) & mask; ; j = (j + 1) & mask {
		s := t.slots[j]
		if s.fp[1] == 0 {
			break
		}
		if home := s.fp[0] & mask; (j-home)&mask < (j-hole)&mask {
			continue
		}
		t.slots[hole] = s
		hole = j
	}
	t.slots[hole] = tomb{}
	t.n--
}

// expire removes the tombstones whose deadline is at or before limit. A
// queued deadline whose tombstone was replaced or removed since is dropped
// without touching the newer one.
func (t *tombs) expire(limit int64) {
	for {
		d, ok := t.q.front()
		if !ok || d.at > limit {
			return
		}
		t.q.pop()
		if i, ok := t.find(fingerprint{d.a, d.b}); ok && t.slots[i].at == d.at {
			t.removeAt(i)
		}
	}
}
