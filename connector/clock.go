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

// MonotonicClock is a Clock that also keeps a monotonic reading, one that
// no step of its wall reading moves. Connectors time every deadline that
// decides when blocks go back (cancel waits, stuck-transfer fallbacks) on
// Monotonic when their clock has it, and on this process's monotonic clock
// otherwise, never on Now: a clock whose readings carry no monotonic part
// (a ManualClock, a user's clock) may step either way. ManualClock
// implements it, so that tests drive those deadlines too.
type MonotonicClock interface {
	Clock
	// Monotonic returns the time elapsed since an origin fixed for the
	// clock's life; it never goes back.
	Monotonic() time.Duration
}

// ManualClock is a Clock that moves only when told to. It is safe for
// concurrent use. Its monotonic reading (MonotonicClock) moves with
// Advance only: Step moves the wall reading alone, as a step of a host's
// wall clock leaves its monotonic clock be.
type ManualClock struct {
	mu   sync.Mutex
	now  time.Time
	mono time.Duration
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
	c.mono += d
	c.mu.Unlock()
}

// Monotonic returns how far Advance has moved the clock since it was made;
// Step does not move it.
func (c *ManualClock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Step moves the clock by d in either direction, as an operator or NTP
// stepping a host's wall clock does; tests use it to show that no guarantee
// rests on a clock that only moves forward. The monotonic reading stays.
func (c *ManualClock) Step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
