package pushconn

import (
	"time"

	"github.com/gonixl/gonixl/pushconn/internal/match"
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
