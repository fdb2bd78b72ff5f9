package lease

import "time"

// Clock tells the time; connector.Clock, and every clock a user gives a
// connector, satisfies it.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
