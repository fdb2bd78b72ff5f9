package pullconn

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/handshake"
)

// The Consumer's side of its reader (reader.go): the reader goroutine's
// tick, the side-channel goroutines whose answers the next tick feeds the
// reader, and the edges the reader acts through. The reader runs under
// wmu; the engine-facing state the edges read is qmu's.

// tick is one round of the reader goroutine (the poller): what the
// engine and the side channel queued since the last, fed to the reader.
func (c *Consumer) tick() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.qmu.Lock()
	queued, done, answers, readied := c.queue, c.hsDone, c.queried, c.readied
	c.queue, c.hsDone, c.queried, c.readied = nil, nil, nil, nil
	c.qmu.Unlock()
	c.rd.tick(queued, done, answers, readied)
}

// handshake starts the handshake with r's engine on its own goroutine.
func (c *Consumer) handshake(r *remote) bool {
	if !c.startExchange() {
		return false
	}
	go c.runHandshake(r)
	return true
}

// runHandshake fetches the engine's payload (shared by the engine's ranks,
// one fetch in flight), pairs this rank with it and loads the metadata of
// the prefill ranks it will contact.
func (c *Consumer) runHandshake(r *remote) {
	defer c.hsWG.Done()
	set, err := c.connect(r)
	if err != nil && c.ctx.Err() != nil {
		// Close cancelled the fetch: the loads end because of the close,
		// and the handshake did not fail.
		err = errClosed
	}
	c.qmu.Lock()
	c.hsDone = append(c.hsDone, handshakeDone{r: r, set: set, err: err})
	c.qmu.Unlock()
	c.poll.Wake()
}

func (c *Consumer) connect(r *remote) (*pairing, error) {
	p, err := c.e.core.Client().Get(c.ctx, r.engineID, r.addr, r.tp)
	if err != nil {
		return nil, err
	}
	set, err := pair(p, &c.cfg.Layout)
	if err != nil {
		return nil, err
	}
	for _, s := range set.notify {
		// A prefill engine restarted under the same agent names replaces
		// the dead instance's metadata.
		name, err := engine.LoadPeerMD(c.cfg.Agent, p.Ranks[s].Agent, p.Ranks[s].Metadata)
		if err != nil {
			c.e.core.Client().Forget(r.engineID, r.addr)
			return nil, fmt.Errorf("%w: engine %q rank %d: load agent metadata: %v", connector.ErrHandshake, r.engineID, s, err)
		}
		if p.Ranks[s].Agent != "" && name != p.Ranks[s].Agent { // vLLM's payload names no agent: loading names it
			return nil, fmt.Errorf("%w: engine %q rank %d: metadata is agent %q, payload says %q", connector.ErrHandshake, r.engineID, s, name, p.Ranks[s].Agent)
		}
		set.agents[s] = name
	}
	return set, nil
}

// queryHolds starts a hold query of ids at r on its own goroutine.
func (c *Consumer) queryHolds(r *remote, ids []string) bool {
	if !c.startExchange() {
		return false
	}
	go c.runHoldQuery(r, ids)
	return true
}

// runHoldQuery asks the prefill engine to extend and confirm its holds of
// ids. A heartbeat notification extends them too, but only this answer
// tells decode that it did: a heartbeat can be lost.
func (c *Consumer) runHoldQuery(r *remote, ids []string) {
	defer c.hsWG.Done()
	ans := holdAnswer{r: r}
	for len(ids) > 0 && ans.err == nil {
		n := min(len(ids), handshake.MaxExtendIDs)
		ds, clk, err := c.e.core.Client().Extend(c.ctx, r.engineID, r.addr, c.cfg.Agent.Name(), ids[:n])
		ans.ids, ans.deadlines, ans.err = append(ans.ids, ids[:n]...), append(ans.deadlines, ds...), err
		if err == nil {
			ans.clock = clk
		}
		ids = ids[n:]
	}
	c.qmu.Lock()
	c.queried = append(c.queried, ans)
	c.qmu.Unlock()
	c.poll.Wake()
}

// confirm starts the pin of refs, the holds of loads, at r on its own
// goroutine.
func (c *Consumer) confirm(r *remote, loads []*load, refs []handshake.HoldRef) bool {
	if !c.startExchange() {
		return false
	}
	go c.runPin(r, loads, refs)
	return true
}

// runPin asks the engine to pin refs, in batches the side channel takes,
// and ends the loads.
func (c *Consumer) runPin(r *remote, loads []*load, refs []handshake.HoldRef) {
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
	// wake-up. After Close began, Close ends the loads (errClosed).
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.isClosed() {
		c.rd.pins.applyVerdicts(v)
	}
}

// queryReady starts load l's readiness query q on its own goroutine.
func (c *Consumer) queryReady(l *load, q handshake.ReadyQuery) bool {
	if !c.startExchange() {
		return false
	}
	go c.runReadyQuery(l, l.r, q)
	return true
}

// runReadyQuery asks prefill once.
func (c *Consumer) runReadyQuery(l *load, r *remote, q handshake.ReadyQuery) {
	defer c.hsWG.Done()
	states, err := c.e.core.Client().Ready(c.ctx, r.engineID, r.addr, c.cfg.Agent.Name(), q)
	c.qmu.Lock()
	c.readied = append(c.readied, readyAnswer{l: l, states: states, err: err})
	c.qmu.Unlock()
	c.poll.Wake()
}

// startExchange counts a side-channel goroutine (handshake, hold query,
// pin, readiness query) that Close waits for, unless the consumer is
// closed: then it reports false and the caller starts nothing.
func (c *Consumer) startExchange() bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.closed {
		return false
	}
	c.hsWG.Add(1)
	return true
}

func (c *Consumer) forget(r *remote) { c.e.core.Client().Forget(r.engineID, r.addr) }

func (c *Consumer) isClosed() bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.closed
}

// published hands an ended load's result to Drain.
func (c *Consumer) published(l *load) {
	c.qmu.Lock()
	c.guard.ended(l, l.result.End)
	delete(c.live, l.id)
	c.results = append(c.results, l.result)
	c.qmu.Unlock()
	c.signal()
}

func (c *Consumer) keepAlives(now time.Time) []*Params {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	var out []*Params
	for id, w := range c.waiting {
		if now.Sub(w.since) >= c.cfg.KeepAliveTimeout {
			// Nothing followed the KeepAlive: stop keeping prefill's blocks.
			delete(c.waiting, id)
			c.waitTimeouts.Inc()
			c.log.Warn("pullconn: KeepAlive without Load timed out; its heartbeats stop", zap.String("request_id", id), zap.Duration("keepalive_timeout", c.cfg.KeepAliveTimeout))
			continue
		}
		out = append(out, &w.p)
	}
	return out
}

func (c *Consumer) kept() []*Params {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	out := make([]*Params, 0, len(c.waiting))
	for _, w := range c.waiting {
		out = append(out, &w.p)
	}
	return out
}

func (c *Consumer) dropKeepAlives(key string, err error) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	for id, w := range c.waiting {
		if w.p.RemoteEngineID+"@"+joinHostPort(w.p.RemoteHost, w.p.RemotePort) == key {
			delete(c.waiting, id)
			c.waitTimeouts.Inc()
			c.log.Warn("pullconn: KeepAlive dropped: the prefill engine's handshake failed", zap.String("request_id", id), zap.Error(err))
		}
	}
}

func (c *Consumer) refers(key string) bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	for _, w := range c.waiting {
		if w.p.RemoteEngineID+"@"+joinHostPort(w.p.RemoteHost, w.p.RemotePort) == key {
			return true
		}
	}
	for _, l := range c.queue {
		if l.key == key {
			return true
		}
	}
	return false
}

func (c *Consumer) takeReadied() []readyAnswer {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if len(c.readied) == 0 {
		return nil
	}
	var take []readyAnswer
	keep := c.readied[:0]
	for _, a := range c.readied {
		if a.err == nil && !a.l.ended && !slices.ContainsFunc(a.states, func(st int) bool { return st < 0 }) {
			take = append(take, a)
		} else {
			keep = append(keep, a)
		}
	}
	clear(c.readied[len(keep):])
	c.readied = keep
	return take
}
