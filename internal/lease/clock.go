package lease

import "time"

// Clock tells the time; connectors take one so tests can drive it
// (nixl/loopback's ManualClock is one, shared with a loopback fabric).
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
