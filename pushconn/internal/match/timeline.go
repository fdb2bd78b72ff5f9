package match

import (
	"math"
	"time"
)

// timeline turns the times a Matcher is given into nanoseconds from the
// first one, so that its deadline heaps compare plain integers and hold no
// pointer for the collector. Sub is monotonic when both times carry a
// monotonic reading, as time.Time's comparisons are, and saturates only 292
// years from the origin.
type timeline struct {
	origin time.Time
	set    bool
}

func (l *timeline) at(t time.Time) int64 {
	if !l.set {
		l.origin, l.set = t, true
	}
	return int64(t.Sub(l.origin))
}

// after returns l.at(t.Add(d)) for d >= 0 with one time subtraction
// instead of an addition and a subtraction, saturating as at does.
func (l *timeline) after(t time.Time, d time.Duration) int64 {
	at := l.at(t)
	if at > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return at + int64(d)
}
