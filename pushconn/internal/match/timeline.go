package match

import "time"

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
