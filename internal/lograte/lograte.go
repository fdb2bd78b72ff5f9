// Package lograte limits how often a log line that peers can trigger at
// will (a forged notification, say) is written: at most one line per
// interval, each saying how many it left out since the one before, so that
// a flood costs a counter increment, not a log write.
package lograte

import (
	"sync"
	"time"
)

// Limiter lets one line through per interval. It is safe for concurrent
// use. Its clock should be monotonic (lease.MonoNow): a wall clock stepped
// back would silence it until it caught up.
type Limiter struct {
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	next    time.Time // no line before this
	started bool
	left    uint64 // lines left out since the last one let through
}

// New returns a Limiter that lets one line through every interval, as now
// reads time.
func New(every time.Duration, now func() time.Time) *Limiter {
	return &Limiter{every: every, now: now}
}

// Allow reports whether a line may be written now and, when it may, how
// many lines Allow refused since the last one it let through.
func (l *Limiter) Allow() (ok bool, leftOut uint64) {
	t := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started && t.Before(l.next) {
		l.left++
		return false, 0
	}
	l.started, l.next = true, t.Add(l.every)
	leftOut, l.left = l.left, 0
	return true, leftOut
}
