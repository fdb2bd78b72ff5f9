package pullconn

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
)

// A decode rank reports a load done only once prefill confirmed, after the
// load's READs completed, that it still held exactly the hold the Params
// name (handshake.HoldRef: id and a digest of the blocks, deadline and
// staging slot) for this decode engine. The confirmation travels on the
// side channel and is also the rank's completion: prefill counts it only
// for that hold, so forged Params never free a real request, and a hold it
// released, let expire or never had is answered "not held". Neither clock
// matters: the answer comes after the READ ended, whatever the clocks read.

// verdicts is a confirmation's outcome for the loads it asked about.
type verdicts struct {
	r     *remote
	loads []*load
	why   []string // one per load; "" confirmed
	clock handshake.Clock
	err   error
}

// startConfirms sends, per prefill engine, one confirmation for the loads
// whose READs finished since the last tick. wmu is held.
func (c *Consumer) startConfirms() {
	if len(c.toConfirm) == 0 {
		return
	}
	// Grouped by engine state, not looked up in c.remotes: an engine
	// forgotten since (its agent disconnected) still answers for the
	// READs that finished.
	by := map[*remote][]*load{}
	var order []*remote
	for _, l := range c.toConfirm {
		if l.ended {
			continue
		}
		if by[l.r] == nil {
			order = append(order, l.r)
		}
		by[l.r] = append(by[l.r], l)
	}
	clear(c.toConfirm)
	c.toConfirm = c.toConfirm[:0]
	for _, r := range order {
		c.startConfirm(r, by[r])
	}
}

func (c *Consumer) startConfirm(r *remote, loads []*load) {
	c.qmu.Lock()
	if c.closed {
		c.qmu.Unlock()
		return // Close fails the loads waiting in c.confirming
	}
	c.hsWG.Add(1)
	c.qmu.Unlock()
	refs := make([]handshake.HoldRef, len(loads))
	for i, l := range loads {
		refs[i] = handshake.HoldRef{ID: l.p.RemoteRequestID, Key: l.p.holdKey(), N: c.cfg.Layout.TPSize, Ranks: r.setup.notify}
	}
	go c.confirm(r, loads, refs)
}

// confirm asks the engine about refs, in batches the side channel takes,
// and ends the loads. It runs on its own goroutine.
func (c *Consumer) confirm(r *remote, loads []*load, refs []handshake.HoldRef) {
	defer c.hsWG.Done()
	v := verdicts{r: r, loads: loads}
	start := time.Now()
	for len(refs) > 0 && v.err == nil {
		n := min(len(refs), handshake.MaxConfirmHolds)
		why, clk, err := c.e.core.Client().Confirm(c.ctx, r.engineID, r.addr, c.cfg.Agent.Name(), refs[:n])
		v.why, v.clock, v.err = append(v.why, why...), clk, err
		refs = refs[n:]
	}
	c.confirmations.Inc()
	c.confirmMicros.Add(uint64(time.Since(start).Microseconds()))
	// Applied here rather than on the next tick: the result is on the
	// critical path, and a hop through the poller goroutine costs another
	// wake-up. After Close began, Close ends the loads (ErrClosed).
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.qmu.Lock()
	closed := c.closed
	c.qmu.Unlock()
	if !closed {
		c.applyVerdicts(v)
	}
}

// applyVerdicts ends the loads a confirmation answered: done where prefill
// confirmed the hold, failed with ErrNotHeld where it did not or could not
// be asked. wmu is held.
func (c *Consumer) applyVerdicts(v verdicts) {
	if v.err == nil && v.clock != (handshake.Clock{}) {
		v.r.clock = v.clock
	}
	for i, l := range v.loads {
		delete(c.confirming, l)
		if l.ended {
			continue // aborted, closed or its scatter failed meanwhile
		}
		switch {
		case v.err != nil:
			c.notHeld.Inc()
			c.fail(l, fmt.Errorf("%w: request %q: prefill engine %q could not confirm that it still held request %q: %w", ErrNotHeld, l.id, l.p.RemoteEngineID, l.p.RemoteRequestID, v.err))
		case v.why[i] != "":
			// Answered "not held": this confirmation counted on no rank
			// that refused it, so it freed nothing there, and a later
			// load of the remote request is confirmed or refused on its
			// own (no read-once guard needed).
			l.completed = false
			c.notHeld.Inc()
			c.log.Warn("pullconn: prefill did not confirm the hold; the bytes read are not trusted", zap.String("request_id", l.id), zap.String("remote_request_id", l.p.RemoteRequestID), zap.String("why", v.why[i]))
			c.fail(l, fmt.Errorf("%w: request %q: prefill engine %q does not hold request %q as its Params say (%s)", ErrNotHeld, l.id, l.p.RemoteEngineID, l.p.RemoteRequestID, v.why[i]))
		default:
			c.end(l, Result{RequestID: l.id})
		}
	}
}
