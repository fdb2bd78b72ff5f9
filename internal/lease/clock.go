package lease

import "github.com/gonixl/gonixl/clock"

// Clock is the public clock.Clock.
type Clock = clock.Clock

// SystemClock is the wall clock (clock.System).
type SystemClock = clock.System
