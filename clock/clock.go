// Package clock is the time source every gonixl component takes: the
// connectors (leases, deadlines, timeouts), their Engines (the clock the
// handshake measures offsets with) and the loopback fabric (when transfers
// and delayed notifications are due). Production code uses System; tests
// drive a Manual clock step by step, one clock for the fabric and the
// connectors, so timing tests are exact and never sleep.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// System is the wall clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// Manual is a Clock that moves only when told to. It is safe for
// concurrent use.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a clock that reads start until advanced.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the clock's time.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d; a negative d is ignored: time never
// goes back.
func (c *Manual) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Step moves the clock by d in either direction, as an operator or NTP
// stepping a host's wall clock does; tests use it to show that no guarantee
// rests on a clock that only moves forward.
func (c *Manual) Step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
