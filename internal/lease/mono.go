package lease

import "time"

// Monotonic is a Clock that also keeps a monotonic reading, one that no
// step of its wall reading moves (connector.MonotonicClock: a
// connector.ManualClock in tests).
type Monotonic interface {
	Clock
	Monotonic() time.Duration
}

// monoEpoch is the origin of the readings MonoNow returns. They are
// compared only with each other, never with wall time: it is arbitrary.
var monoEpoch = time.Unix(0, 0)

// processStart anchors this process's monotonic clock: time.Since reads
// the monotonic part of time.Now, which no wall-clock step moves.
var processStart = time.Now()

// MonoNow returns a reader of the monotonic time that deadlines deciding
// when blocks go back are timed by: clk's monotonic reading when it keeps
// one, this process's monotonic clock otherwise. The readings it returns
// are times on an arbitrary epoch, to compare and subtract with each other
// only (a lease.Table takes them); no step of clk's wall reading moves
// them, whatever clk is.
func MonoNow(clk Clock) func() time.Time {
	if m, ok := clk.(Monotonic); ok {
		return func() time.Time { return monoEpoch.Add(m.Monotonic()) }
	}
	return func() time.Time { return monoEpoch.Add(time.Since(processStart)) }
}
