package stats

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// StartLogger logs s's snapshot as one "KV Transfer metrics:" line every
// interval, skipping intervals in which nothing was counted, with fields
// attached (engine id, rank). The returned stop function ends the logging
// goroutine and waits for it; calling it again does nothing.
func StartLogger(log *zap.Logger, interval time.Duration, s *Set, fields ...zap.Field) (stop func()) {
	if log == nil || interval <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		var prev Snapshot
		for {
			select {
			case <-done:
				return
			case <-t.C:
				snap := s.Snapshot()
				if changed(snap, prev) {
					log.Info(snap.LogLine(), append(snap.Fields(), fields...)...)
					prev = snap
				}
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
