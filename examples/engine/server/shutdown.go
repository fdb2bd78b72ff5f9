package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
	"go.uber.org/zap"
)

// DefaultHoldDrain is how long Close waits, at most, for decode engines to
// read the blocks a prefill engine holds for them. A decode engine reads
// within milliseconds of the prefill's answer; a hold still unread after a
// few seconds of shutdown is most likely for a request nobody will decode,
// and waiting out its lease (30 s by default) only delays the exit.
const DefaultHoldDrain = 5 * time.Second

// ShutdownOptions bound Shutdown's waits; each is also bounded by ctx.
type ShutdownOptions struct {
	// HoldDrain bounds the wait for decode engines to read the blocks held
	// for them (prefill), or for loads that are ending (decode); once it
	// has passed, closing the ranks releases them. 0 means
	// DefaultHoldDrain; a negative value means no wait.
	HoldDrain time.Duration
}

// Close is Shutdown with the default options.
func (s *Server) Close(ctx context.Context) error {
	return s.Shutdown(ctx, ShutdownOptions{})
}

// Shutdown shuts the engine down gracefully: /health answers 503 and new
// requests get 503; requests in flight finish until ctx ends, then are
// cancelled; blocks still held for decode are given until o.HoldDrain has
// passed (or ctx ended) to be read; then every connector rank closes, which
// releases every block, and the agents and the KV memory are freed. Each
// wait is logged as it starts (what, how many, the bound) and as it ends
// (how long it took, what was left). It is idempotent (Close included);
// later calls return the first one's error.
func (s *Server) Shutdown(ctx context.Context, o ShutdownOptions) error {
	s.closeOnce.Do(func() { s.closeErr = s.shutdown(ctx, o) })
	return s.closeErr
}

// bound describes how long ctx lets a wait last, for the logs.
func bound(ctx context.Context, d time.Duration) zap.Field {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); d < 0 || left < d {
			d = max(left, 0)
		}
	}
	if d < 0 {
		return zap.String("bound", "none (until cancelled)")
	}
	return zap.Duration("bound", d.Round(time.Millisecond))
}

func (s *Server) shutdown(ctx context.Context, o ShutdownOptions) error {
	start := time.Now()
	s.closing.Store(true)
	// New requests get 503 (and /health 503) while the ones in flight end.
	var err error
	if n := s.active.Load(); n > 0 {
		s.log.Info("engine closing: waiting for requests in flight", zap.Int64("in_flight", n), bound(ctx, -1))
	} else {
		s.log.Info("engine closing: no requests in flight")
	}
	for s.active.Load() > 0 && err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err == nil {
		err = s.httpSrv.Shutdown(ctx)
	}
	if err != nil {
		s.log.Warn("drain deadline passed: cancelling requests in flight", zap.Int64("in_flight", s.active.Load()),
			zap.Duration("waited", time.Since(start).Round(time.Millisecond)), zap.Error(err))
	}
	s.cancel() // handlers still running see their context end
	s.httpSrv.Close()
	s.handlers.Wait()
	<-s.served

	// Let decode engines read what prefill holds (prefill), or loads end
	// (decode), for o.HoldDrain within ctx.
	s.waitHeld(ctx, o.HoldDrain)

	close(s.stopCh)
	<-s.loopDone
	s.release()
	if n := s.st.blocks.Load(); n != 0 {
		s.log.Error("blocks still allocated after close", zap.Int64("blocks", n))
		err = errors.Join(err, fmt.Errorf("engine: %d blocks still allocated after close", n))
	}
	s.log.Info("engine closed", zap.Uint64("requests_done", s.st.done.Load()),
		zap.Duration("took", time.Since(start).Round(time.Millisecond)))
	return err
}

// waitHeld waits, at most d (DefaultHoldDrain when 0, none when negative)
// and until ctx ends, for the blocks held for remote decode engines to be
// read and the loads that are ending to end, and logs what it waited for.
func (s *Server) waitHeld(ctx context.Context, d time.Duration) {
	n := s.loop.pending.Load()
	if n == 0 {
		return
	}
	if d == 0 {
		d = DefaultHoldDrain
	}
	what, key := "decode engines to read the blocks held for them", "held_requests"
	if s.cfg.Role == RoleDecode {
		what, key = "KV loads to end", "loading_requests"
	}
	if d < 0 || ctx.Err() != nil {
		s.log.Info("engine closing: releasing blocks without waiting for "+what, zap.Int64(key, n))
		return
	}
	fields := []zap.Field{zap.Int64(key, n), bound(ctx, d)}
	if s.cfg.Role == RolePrefill {
		fields = append(fields, zap.Duration("lease", cmp.Or(s.cfg.Lease, connector.DefaultLease)))
	}
	s.log.Info("engine closing: waiting for "+what, fields...)
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s.loop.waitHeld(hctx)
	waited := zap.Duration("waited", time.Since(start).Round(time.Millisecond))
	if left := s.loop.pending.Load(); left > 0 {
		s.log.Warn("engine closing: bound passed, releasing what is still held", zap.Int64(key, left), waited)
	} else {
		s.log.Info("engine closing: all held blocks read", waited)
	}
}
