package lease

import (
	"testing"
	"time"
)

// steppingClock is a clock whose readings carry no monotonic part, as a
// user's clock may: its wall reading steps either way.
type steppingClock struct{ now time.Time }

func (c *steppingClock) Now() time.Time { return c.now }

// monoClock keeps a monotonic reading beside its wall one.
type monoClock struct {
	steppingClock
	mono time.Duration
}

func (c *monoClock) Monotonic() time.Duration { return c.mono }

func TestMonoNowFollowsTheClocksMonotonicReadingNotItsSteps(t *testing.T) {
	c := &monoClock{steppingClock: steppingClock{now: time.Unix(1000, 0)}}
	mono := MonoNow(c)
	t0 := mono()
	c.now = c.now.Add(time.Hour) // a step forward
	if got := mono().Sub(t0); got != 0 {
		t.Fatalf("a step of the wall reading moved the monotonic one by %v", got)
	}
	c.now = c.now.Add(-2 * time.Hour) // and back
	c.mono += 3 * time.Second
	if got := mono().Sub(t0); got != 3*time.Second {
		t.Fatalf("monotonic reading moved %v, want 3s", got)
	}
}

func TestMonoNowIgnoresAClockWithoutAMonotonicReading(t *testing.T) {
	c := &steppingClock{now: time.Unix(1000, 0)}
	mono := MonoNow(c)
	t0 := mono()
	c.now = c.now.Add(time.Hour)
	// The process's monotonic clock moved by far less than the step (the
	// test takes no hour).
	if got := mono().Sub(t0); got < 0 || got >= time.Hour {
		t.Fatalf("the monotonic reading moved %v across a one-hour step of the clock", got)
	}
}
