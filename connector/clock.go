package connector

import (
	"sync"
	"time"
)

// Clock is the time source a connector, its Engine and the loopback fabric
// take (EngineConfig.Clock, RankConfig.Clock, loopback.WithClock): leases,
// deadlines and timeouts are read from it. Production code leaves it nil
// (the wall clock); tests drive a ManualClock step by step, one clock for the
// fabric and the connectors, so timing tests are exact and never sleep.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to. It is safe for
// concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock that reads start until advanced.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d; a negative d is ignored: time never
// goes back.
func (c *ManualClock) Advance(d time.Duration) {
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
func (c *ManualClock) Step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
