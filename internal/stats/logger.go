package stats

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// StartLogger logs one "KV Transfer metrics:" line at the end of every
// interval in which something was counted, covering that interval only,
// with fields attached (engine id, rank). The returned stop function ends
// the logging goroutine and waits for it; calling it again does nothing.
func StartLogger(log *zap.Logger, interval time.Duration, s *Set, fields ...zap.Field) (stop func()) {
	if log == nil || interval <= 0 {
		return func() {}
	}
	t := time.NewTicker(interval)
	return startLogger(newIntervalLogger(log, s, fields...), t.C, t.Stop)
}

// startLogger calls l.tick on every tick until stopped; release is called
// when the goroutine ends.
func startLogger(l *intervalLogger, ticks <-chan time.Time, release func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer release()
		for {
			select {
			case <-done:
				return
			case <-ticks:
				l.tick()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// intervalLogger writes the metrics line at the end of each interval. Only
// its goroutine calls tick; tests call it directly to end intervals
// deterministically.
type intervalLogger struct {
	log    *zap.Logger
	s      *Set
	fields []zap.Field
	// prev is the counters when the last line was logged: the line shows
	// how far they moved since.
	prev Snapshot
}

func newIntervalLogger(log *zap.Logger, s *Set, fields ...zap.Field) *intervalLogger {
	return &intervalLogger{log: log, s: s, fields: fields}
}

// tick ends an interval: it logs the interval's line and starts the next,
// or, when nothing was counted, logs nothing and keeps the interval going
// (vLLM logs no line for empty stats and resets only after a line:
// metrics.py KVConnectorLogging.log, vllm 0.34.0).
func (l *intervalLogger) tick() {
	now := l.s.Snapshot()
	moved, prefixHits, anyMoved := movedBetween(now, l.prev)
	xfers, ok := l.s.interval.take(anyMoved)
	if !ok {
		return
	}
	items := intervalReport{xfers: xfers, moved: moved, prefixHits: prefixHits}.items()
	l.log.Info(lineOf(items), fieldsOf(items, l.fields)...)
	l.prev = now
}
