package match

import "hash/maphash"

// tombs remembers the registrations paired within the registration TTL, so
// that a duplicate of one (the same sender, request id and transfer id) is
// dropped rather than paired again. There are as many as registrations
// arrive in a TTL (480 s by default), far more than wait at any time, so
// they are kept without a pointer for the collector to trace: by a 128-bit
// keyed fingerprint of their identity, in a map and a deadline heap of
// plain values. Two identities share a fingerprint with a chance of about
// n/2^128 for n tombstones; a registration so taken for a duplicate is
// dropped and ends at decode's registration watchdog, as a lost one does.
type tombs struct {
	m map[fingerprint]tomb
	q []tombAt // min-heap by at
}

type fingerprint [2]uint64

type tomb struct {
	seq uint64
	at  int64 // deadline on the matcher's timeline
}

type tombAt struct {
	at int64
	fp fingerprint
}

var fpSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func fingerprintOf(id identity) fingerprint {
	var fp fingerprint
	for i, seed := range fpSeeds {
		var h maphash.Hash
		h.SetSeed(seed)
		h.WriteString(id.sender)
		h.WriteByte(0)
		h.WriteString(id.key.RequestID)
		h.WriteByte(0)
		h.WriteString(id.key.TransferID)
		fp[i] = h.Sum64()
	}
	return fp
}

func newTombs() tombs { return tombs{m: map[fingerprint]tomb{}} }

func (t *tombs) get(fp fingerprint) (tomb, bool) {
	x, ok := t.m[fp]
	return x, ok
}

func (t *tombs) remove(fp fingerprint) { delete(t.m, fp) }

// put leaves a tombstone for fp until at, replacing any earlier one.
func (t *tombs) put(fp fingerprint, seq uint64, at int64) {
	t.m[fp] = tomb{seq: seq, at: at}
	t.q = append(t.q, tombAt{at: at, fp: fp})
	for i := len(t.q) - 1; i > 0; {
		p := (i - 1) / 2
		if t.q[i].at >= t.q[p].at {
			break
		}
		t.q[i], t.q[p] = t.q[p], t.q[i]
		i = p
	}
}

// expire removes the tombstones whose deadline is at or before limit. A
// heap entry whose tombstone was replaced or removed since is dropped
// without touching the newer one.
func (t *tombs) expire(limit int64) {
	for len(t.q) > 0 && t.q[0].at <= limit {
		top := t.q[0]
		if x, ok := t.m[top.fp]; ok && x.at == top.at {
			delete(t.m, top.fp)
		}
		t.pop()
	}
}

// pop is deadlines.pop for plain values. The two heaps are written out
// twice on purpose: one generic heap over a due() method ran
// BenchmarkMatch10kPending 10-20% slower (the method is called through the
// instantiation's dictionary in every comparison).
func (t *tombs) pop() {
	n := len(t.q) - 1
	t.q[0] = t.q[n]
	t.q = t.q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && t.q[r].at < t.q[l].at {
			m = r
		}
		if t.q[m].at >= t.q[i].at {
			break
		}
		t.q[i], t.q[m] = t.q[m], t.q[i]
		i = m
	}
}
