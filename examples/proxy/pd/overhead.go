package pd

import (
	"slices"
	"sync"
	"time"
)

// legClock keeps when a request's legs were in flight, from their send to
// the close of their answer's body, so that the trace can say how much of
// its TTFT was the proxy's own (llm-d's P/D sidecar reports it as the
// coordinator overhead): the part of [start, first token] during which no
// leg was in flight (an engine leg, or a hop to the render tier). Push
// sends both legs at once, and a retried leg is another interval, so the
// intervals are merged, not summed.
type legClock struct {
	mu   sync.Mutex
	legs []legInterval
}

type legInterval struct {
	start, end time.Time // end zero: in flight
}

// begin records a leg sent now and returns its index for end. A nil
// legClock records nothing.
func (l *legClock) begin(now time.Time) int {
	if l == nil {
		return -1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.legs = append(l.legs, legInterval{start: now})
	return len(l.legs) - 1
}

// end records that leg i's answer was closed at now.
func (l *legClock) end(i int, now time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if i >= 0 && i < len(l.legs) && l.legs[i].end.IsZero() {
		l.legs[i].end = now
	}
}

// overhead is the time in [start, at] during which no leg was in flight;
// a leg still in flight counts as running until at.
func (l *legClock) overhead(start, at time.Time) time.Duration {
	if l == nil {
		return at.Sub(start)
	}
	l.mu.Lock()
	iv := make([]legInterval, 0, len(l.legs))
	for _, g := range l.legs {
		if g.end.IsZero() || g.end.After(at) {
			g.end = at
		}
		if g.start.Before(start) {
			g.start = start
		}
		if g.end.After(g.start) {
			iv = append(iv, g)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(iv, func(a, b legInterval) int { return a.start.Compare(b.start) })
	var covered time.Duration
	var cur legInterval
	for i, g := range iv {
		switch {
		case i == 0:
			cur = g
		case !g.start.After(cur.end):
			if g.end.After(cur.end) {
				cur.end = g.end
			}
		default:
			covered += cur.end.Sub(cur.start)
			cur = g
		}
	}
	if len(iv) > 0 {
		covered += cur.end.Sub(cur.start)
	}
	total := at.Sub(start)
	if covered > total {
		return 0
	}
	return total - covered
}
