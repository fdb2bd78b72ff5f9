package pullconn

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
)

// Readiness queries (handshake.ReadyQuery): a decode rank whose Params say
// RemoteStagingAwait asks the prefill ranks it reads how far their
// background gathers got (stagegather.go), and posts each chunk READ of a
// rank's slot once that rank has gathered the chunk's regions. The query
// is a long poll: prefill answers as soon as a rank's state changes, or
// with the states it has after readyWait, and decode asks again until
// every rank it reads is done. Only a state prefill answered opens a
// chunk: a lost or late answer delays the READs (the load fails at its
// TransferTimeout, never reads early); a failed gather fails the load with
// ErrStaging, a hold prefill no longer has with ErrNotHeld.

// readyWait is how long a readiness query may wait on prefill for a
// change; decode asks again after each answer.
const readyWait = 200 * time.Millisecond

// readyRetry is how long decode waits before it asks again after a
// failed readiness query.
const readyRetry = 2 * time.Millisecond

// ready answers a readiness query for the ranks it names, waiting up to
// its WaitMicros for a state that differs from the one decode knows. It
// runs on a side-channel goroutine.
func (e *pullEngine) ready(_, _ string, q handshake.ReadyQuery) []int64 {
	if lose, delay := e.slots.answerFault(); lose {
		return nil
	} else if delay > 0 {
		time.Sleep(delay)
	}
	deadline := time.Now().Add(time.Duration(q.WaitMicros) * time.Microsecond)
	out := make([]int64, len(q.Ranks))
	for {
		change := e.slots.changes() // before the states: no change is missed
		prods := e.ranks()
		moved := false
		for i, rk := range q.Ranks {
			st := handshake.ReadyNotHeld
			if prods != nil && prods[rk].stage != nil {
				st = prods[rk].gatherState(q.ID, q.Key)
			}
			out[i] = int64(st)
			moved = moved || st != q.Known[i]
		}
		wait := time.Until(deadline)
		if moved || wait <= 0 {
			return out
		}
		t := time.NewTimer(wait)
		select {
		case <-change:
		case <-t.C:
		}
		t.Stop()
	}
}

// await is a load's wait for prefill's background gathers: per prefill
// rank whose slot it reads, the state last answered (regions gathered)
// and the regions its READs need in all.
type await struct {
	ranks   []int
	known   []int
	need    []int
	asking  bool
	retryAt time.Time
}

// readyAnswer is a readiness query's outcome for one load.
type readyAnswer struct {
	l      *load
	states []int
	err    error
}

// readyCounters are a staging decode rank's readiness counters.
type readyCounters struct {
	queries, failed *stats.Counter
}

func newReadyCounters(s *stats.Set) readyCounters {
	return readyCounters{
		queries: s.Counter("readiness_queries", "Readiness queries answered by prefill engines (how far their background gathers into staging slots got)."),
		failed:  s.Counter("failed_readiness_queries", "Readiness queries that failed; asked again, the load's READs of the slot wait meanwhile."),
	}
}

// awaitRank records that the load's READs of prefill rank s's slot need
// its first need regions gathered.
func (l *load) awaitRank(s, need int) {
	if l.await == nil {
		l.await = &await{}
	}
	a := l.await
	if i := slices.Index(a.ranks, s); i >= 0 {
		a.need[i] = max(a.need[i], need)
		return
	}
	a.ranks, a.known, a.need = append(a.ranks, s), append(a.known, 0), append(a.need, need)
}

// pendingRead makes x a READ posted only once prefill rank x.rank has
// gathered need regions: its lists are kept (copied: planning reuses
// them).
func (l *load) pendingRead(x *xfer, local, remote nixl.XferList, need int) {
	x.pending, x.need = true, need
	x.local = nixl.XferList{Mem: local.Mem, Descs: slices.Clone(local.Descs)}
	x.remote = nixl.XferList{Mem: remote.Mem, Descs: slices.Clone(remote.Descs)}
	l.xfers = append(l.xfers, x)
	l.awaitRank(x.rank, need)
}

// askReady starts the load's readiness query unless one is in flight, the
// load waits for nothing, or it ended.
func (c *stager) askReady(l *load) {
	a := l.await
	if a == nil || a.asking || l.ended || c.readyDone(l) {
		return
	}
	// The wait ends well within the exchange's own timeout (the engine's
	// HandshakeTimeout) and by the load's deadline.
	wait := min(readyWait, c.rd.hsTimeout/2, l.deadline.Sub(c.rd.now()))
	q := handshake.ReadyQuery{ID: l.p.RemoteRequestID, Key: l.hold, Ranks: slices.Clone(a.ranks), Known: slices.Clone(a.known),
		WaitMicros: max(wait.Microseconds(), 0)}
	if c.rd.io.queryReady(l, q) {
		a.asking = true
	}
}

// readyDone reports whether every rank the load awaits has gathered what
// its READs need.
func (c *stager) readyDone(l *load) bool {
	for i, k := range l.await.known {
		if k < l.await.need[i] {
			return false
		}
	}
	return true
}

// applyReady takes a readiness answer: a failed gather or a hold prefill
// no longer has fails the load; chunks whose regions are gathered are
// posted (Inline: on the next Drain); decode asks again until every rank
// is done.
func (c *stager) applyReady(ans readyAnswer) {
	c.takeReady(ans, false)
}

// takeReady is applyReady; during a scatter (inScatter) a READ that cannot
// be posted fails its load only on the load's next poll (postErr): no
// load may end while a copy may still write into the blocks of one.
func (c *stager) takeReady(ans readyAnswer, inScatter bool) {
	l, a := ans.l, ans.l.await
	a.asking = false
	if l.ended {
		return
	}
	if ans.err != nil {
		c.readiness.failed.Inc()
		c.rd.log.Debug("pullconn: readiness query failed; asking again", zap.String("request_id", l.id), zap.Error(ans.err))
		a.retryAt = c.rd.now().Add(readyRetry)
		return
	}
	c.readiness.queries.Inc()
	for i, st := range ans.states {
		switch {
		case st == handshake.ReadyFailed:
			c.stage.Failures.Inc()
			c.rd.fail(l, gatherError(l.id, a.ranks[i]))
			return
		case st < 0:
			c.rd.pins.notHeld.Inc()
			c.rd.fail(l, fmt.Errorf("%w: request %q: prefill engine %q rank %d has no gather of request %q into its staging slot as the Params say (the hold ended, or other Params)",
				ErrNotHeld, l.id, l.p.RemoteEngineID, a.ranks[i], l.p.RemoteRequestID))
			return
		case st > a.known[i]:
			a.known[i] = st
		}
	}
	if c.rd.cfg.Inline {
		c.rd.unblocked = append(c.rd.unblocked, l)
	} else if err := c.postReady(l); err != nil {
		if inScatter {
			l.postErr = err
		} else {
			c.rd.fail(l, err)
		}
		return
	}
	c.askReady(l)
}

// readyProgress runs during a pipelined scatter (the copier calls it
// between its polls): readiness answers that came meanwhile and open
// chunks (no failure, no error) are applied and their READs posted at
// once, rather than after the scatter, so the next chunk's READ overlaps
// this chunk's scatter as it does when every READ is posted at first.
// The others wait for the next tick.
func (c *stager) readyProgress() {
	for _, a := range c.rd.io.takeReadied() {
		c.takeReady(a, true)
	}
}

// postReady posts the load's pending READs whose regions are gathered; an
// error is the load's failure, for the caller to end it with.
func (c *stager) postReady(l *load) error {
	if l.ended || l.postErr != nil {
		return nil
	}
	set := l.r.setup
	for _, x := range l.xfers {
		if !x.pending || x.need > l.await.known[slices.Index(l.await.ranks, x.rank)] {
			continue
		}
		x.pending = false
		h, err := c.rd.xfer.CreateXferReq(nixl.Read, x.local, x.remote, set.agents[x.rank], nil)
		if err == nil {
			x.h = h
			// Even a READ done at once is left for the next poll to see
			// done, which scatters it while later chunks are still read:
			// a scatter may be running here (readyProgress).
			_, err = c.rd.xfer.PostXferReq(h, nil)
			x.start = c.rd.steady()
		}
		if err != nil {
			c.rd.stats.FailedTransfers.Inc()
			failed := fmt.Errorf("%w: request %q: READ from engine %q rank %d (agent %q): %w", ErrTransfer, l.id, set.payload.EngineID, x.rank, set.agents[x.rank], err)
			if agentGone(err) {
				c.rd.eng.forget(l.r)
				return c.rd.restart.goneError(l, x.rank, failed)
			}
			return failed
		}
		x.local, x.remote = nixl.XferList{}, nixl.XferList{}
	}
	return nil
}

// retryReady asks again for the loads whose last readiness query failed,
// once their retry time came.
func (c *stager) retryReady(now time.Time) {
	for _, l := range c.rd.reading {
		if a := l.await; a != nil && !a.asking && !l.ended && !a.retryAt.IsZero() && !now.Before(a.retryAt) {
			a.retryAt = time.Time{}
			c.askReady(l)
		}
	}
}
