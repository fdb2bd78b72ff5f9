package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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

// DefaultUnclaimedHold is how long, at shutdown, a pull prefill keeps a
// hold that no decode engine has asked about: a decode engine asks (its
// pin as it posts its READs, or a hold query while it waits for blocks)
// within milliseconds of the prefill's answer, so such a hold is for nobody
// (the client or the proxy went away) and is dropped.
const DefaultUnclaimedHold = time.Second

// shutdownWhy is the reason a decode engine is told for a hold dropped at
// shutdown.
const shutdownWhy = "the prefill engine is shutting down"

// ShutdownOptions bound Shutdown's waits; each is also bounded by ctx.
type ShutdownOptions struct {
	// HoldDrain bounds the wait for decode engines to read the blocks held
	// for them (prefill), or for loads that are ending (decode); once it
	// has passed, a pull prefill drops every hold no decode is reading
	// (pullconn.Producer.DropHolds: a decode engine that comes for one is
	// told), waits at most HoldDrain again for the ones being read, and
	// closing the ranks releases the rest. 0 means DefaultHoldDrain; a
	// negative value means no wait.
	HoldDrain time.Duration
	// UnclaimedHold (pull prefill): a hold no decode engine asked about for
	// this long is dropped during the wait, which ends as soon as nothing
	// else is held. 0 means DefaultUnclaimedHold.
	UnclaimedHold time.Duration
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
		// With no request in flight nothing is cut short, whatever the
		// HTTP server's bookkeeping of idle keep-alive connections says when
		// ctx has ended: the error says requests were cancelled, so it
		// counts only when one was.
		if herr := s.httpSrv.Shutdown(ctx); herr != nil && s.active.Load() > 0 {
			err = herr
		}
	}
	if err != nil {
		s.log.Warn("drain deadline passed: cancelling requests in flight", zap.Int64("in_flight", s.active.Load()),
			zap.Duration("waited", time.Since(start).Round(time.Millisecond)), zap.Error(err))
	}
	s.cancel() // handlers still running see their context end
	s.httpSrv.Close()
	s.handlers.closeAndWait()
	<-s.served

	// Let decode engines read what prefill holds (prefill), or loads end
	// (decode), for o.HoldDrain within ctx.
	s.waitHeld(ctx, o)

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

// waitHeld waits, at most o.HoldDrain (DefaultHoldDrain when 0, none when
// negative) and until ctx ends, for the blocks held for remote decode
// engines to be read and the loads that are ending to end, and logs what it
// waited for. A pull prefill drops meanwhile the holds nobody asked about
// for o.UnclaimedHold, and at the bound every hold nobody reads, then waits
// for those being read (at most the bound again).
func (s *Server) waitHeld(ctx context.Context, o ShutdownOptions) {
	n := s.loop.pending.Load()
	if n == 0 {
		return
	}
	d := cmp.Or(o.HoldDrain, DefaultHoldDrain)
	unclaimed := cmp.Or(o.UnclaimedHold, DefaultUnclaimedHold)
	what, key := "decode engines to read the blocks held for them", "held_requests"
	if s.cfg.Role == RoleDecode {
		what, key = "KV loads to end", "loading_requests"
	}
	if d < 0 || ctx.Err() != nil {
		s.log.Info("engine closing: releasing blocks without waiting for "+what, zap.Int64(key, n))
		return
	}
	fields := []zap.Field{zap.Int64(key, n), bound(ctx, d)}
	var dropping func()
	if s.cfg.Role == RolePrefill {
		fields = append(fields, zap.Duration("lease", cmp.Or(s.cfg.Lease, connector.DefaultLease)))
		if s.cfg.Connector == ConnPull && s.cfg.Protocol != ProtocolVLLM {
			fields = append(fields, zap.Duration("unclaimed_dropped_after", unclaimed))
			dropping = func() { s.dropHolds(unclaimed, false) }
		}
	}
	s.log.Info("engine closing: waiting for "+what, fields...)
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s.loop.waitHeld(hctx, dropping)
	waited := zap.Duration("waited", time.Since(start).Round(time.Millisecond))
	left := s.loop.pending.Load()
	if left == 0 {
		s.log.Info("engine closing: all held blocks read or dropped", waited)
		return
	}
	if dropping == nil || ctx.Err() != nil {
		s.log.Warn("engine closing: bound passed, releasing what is still held", zap.Int64(key, left), waited)
		return
	}
	// The bound passed: drop what nobody reads now; decode engines that come
	// for it are told. What is being read gets the bound again.
	// The loop frees the dropped holds' blocks on its next step.
	s.dropHolds(0, true)
	rctx, rcancel := context.WithTimeout(ctx, d)
	defer rcancel()
	s.loop.waitHeld(rctx, nil)
	waited = zap.Duration("waited", time.Since(start).Round(time.Millisecond))
	if left := s.loop.pending.Load(); left > 0 {
		s.log.Warn("engine closing: bound passed, releasing what is still held", zap.Int64(key, left), waited)
	} else {
		s.log.Info("engine closing: all held blocks read or dropped", waited)
	}
}

// dropHolds drops, on every rank, the holds no decode engine reads (with
// unclaimedFor > 0: only those nobody asked about for that long), logs what
// it dropped (always when atBound) and returns how many holds stay, the
// most of any rank.
//
// A request's holds are one per rank, and each rank times its own from its
// RequestFinished, which the engine calls rank after rank: on a busy
// machine one rank's hold passes unclaimedFor a round before the next
// rank's. A request counts as dropped once every rank dropped its hold, so
// the line says how many requests went, once each (s.drops keeps each
// rank's running count; the fewest is the requests every rank dropped).
func (s *Server) dropHolds(unclaimedFor time.Duration, atBound bool) (kept int) {
	if s.drops.perRank == nil {
		s.drops.perRank = make([]int, len(s.prods))
	}
	dropped := 0
	for i, p := range s.prods {
		n, k, err := p.DropHolds(shutdownWhy, unclaimedFor)
		if err != nil {
			s.log.Warn("engine closing: dropping holds", zap.Int("tp_rank", i), zap.Error(err))
			continue
		}
		s.drops.perRank[i] += n
		dropped, kept = max(dropped, n), max(kept, k)
	}
	if atBound {
		s.log.Info("engine closing: bound passed, dropped the holds no decode engine is reading; decode engines that come for them are told",
			zap.Int("dropped", dropped), zap.Int("being_read", kept))
		return kept
	}
	if all := slices.Min(s.drops.perRank); all > s.drops.logged {
		s.log.Info("engine closing: dropped holds no decode engine asked about", zap.Int("dropped", all-s.drops.logged),
			zap.Duration("unclaimed_for", unclaimedFor), zap.Int("still_held", kept))
		s.drops.logged = all
	}
	return kept
}
