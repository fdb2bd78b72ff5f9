package pushconn

import "github.com/gonixl/gonixl/pushconn/internal/match"

// expiredCap bounds how many lapsed requests a prefill rank remembers.
const expiredCap = 4096

// lapsed remembers the keys of the last finished requests whose lease ran
// out before every registration came, so a registration that arrives later
// is told at once (PUSH_FAIL "expired") instead of waiting out its
// registration timeout for blocks that are gone. It is a ring: the oldest
// key is forgotten first, and a forgotten key costs only the fast answer.
type lapsed struct {
	ring  []match.Key
	next  int
	byTID map[string]int // live ring entries per transfer id
	byID  map[string]int
	byBas map[string]int
}

func newLapsed(n int) *lapsed {
	return &lapsed{ring: make([]match.Key, 0, n), byTID: map[string]int{}, byID: map[string]int{}, byBas: map[string]int{}}
}

// add remembers k, forgetting the oldest key when full.
func (l *lapsed) add(k match.Key) {
	if len(l.ring) < cap(l.ring) {
		l.ring = append(l.ring, k)
	} else {
		l.drop(l.ring[l.next])
		l.ring[l.next] = k
		l.next = (l.next + 1) % len(l.ring)
	}
	l.count(k, 1)
}

// forget removes every remembered key that a finished request with key k
// would pair with (the same transfer id, or the same id without its suffix
// unless both carry different transfer ids): registrations pair with the
// new blocks now, and a key left behind would refuse them.
func (l *lapsed) forget(k match.Key) {
	base := match.Base(k.RequestID)
	if l.byBas[base] == 0 && (k.TransferID == "" || l.byTID[k.TransferID] == 0) {
		return // the common case: nothing to scan
	}
	for i, old := range l.ring {
		if old == (match.Key{}) {
			continue
		}
		sameTID := k.TransferID != "" && old.TransferID == k.TransferID
		sameBase := match.Base(old.RequestID) == base && !conflicting(old, k)
		if sameTID || sameBase {
			l.drop(old)
			l.ring[i] = match.Key{}
		}
	}
}

// conflicting reports whether both keys carry different transfer ids, so
// their request ids must not pair them.
func conflicting(a, b match.Key) bool {
	return a.TransferID != "" && b.TransferID != "" && a.TransferID != b.TransferID
}

func (l *lapsed) drop(k match.Key) {
	if k != (match.Key{}) {
		l.count(k, -1)
	}
}

func (l *lapsed) count(k match.Key, d int) {
	bump := func(m map[string]int, s string) {
		if m[s] += d; m[s] <= 0 {
			delete(m, s)
		}
	}
	if k.TransferID != "" {
		bump(l.byTID, k.TransferID)
	}
	bump(l.byID, k.RequestID)
	bump(l.byBas, match.Base(k.RequestID))
}

// has reports whether a registration with key k names a lapsed request
// itself: the same transfer id, or the same request id unless both carry
// different transfer ids. The same id without its suffix does not count:
// it cannot tell a late registration of the lapsed attempt from an early
// one of a retry, whose blocks are still to come. The maps filter; only a
// hit scans the ring.
func (l *lapsed) has(k match.Key) bool {
	if k.TransferID != "" && l.byTID[k.TransferID] > 0 {
		return true
	}
	if l.byID[k.RequestID] == 0 {
		return false
	}
	for _, old := range l.ring {
		if old != (match.Key{}) && old.RequestID == k.RequestID && !conflicting(old, k) {
			return true
		}
	}
	return false
}
