package pullconn

import (
	"time"

	"go.uber.org/zap"
)

// forgetStaleEngines forgets the prefill engines this rank has had no
// request with for RankConfig.EngineTTL and none in flight (vLLM's
// engine_ttl): their agents' metadata is unloaded and their handshake
// dropped, so a later request to one handshakes again. It runs when the
// rank starts a handshake with another engine, as vLLM's does, so that an
// idle rank does no work for it. wmu is held.
func (c *Consumer) forgetStaleEngines(now time.Time) {
	if c.cfg.EngineTTL < 0 {
		return
	}
	var stale []*remote
	for _, r := range c.remotes {
		if r.ready && now.Sub(r.lastActive) > c.cfg.EngineTTL && !c.usesEngine(r) {
			stale = append(stale, r)
		}
	}
	for _, r := range stale {
		c.forgetHandshake(r)
		c.unloadAgents(r)
		c.forgotten.Inc()
		c.log.Info("pullconn: forgot an idle prefill engine", zap.String("remote_engine_id", r.engineID),
			zap.String("addr", r.addr), zap.Duration("idle", now.Sub(r.lastActive)), zap.Duration("engine_ttl", c.cfg.EngineTTL))
	}
}

// usesEngine reports whether anything of this rank still refers to r: a
// load waiting for, reading from or settling with it, a hold query to it,
// or a KeepAlive request of it. wmu is held.
func (c *Consumer) usesEngine(r *remote) bool {
	if len(r.parked) > 0 || r.querying {
		return true
	}
	for _, set := range [][]*load{c.reading, c.ready, c.draining, c.toPin} {
		for _, l := range set {
			if l.r == r {
				return true
			}
		}
	}
	for l := range c.awaitingPin {
		if l.r == r {
			return true
		}
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	for _, w := range c.waiting {
		if w.p.RemoteEngineID+"@"+joinHostPort(w.p.RemoteHost, w.p.RemotePort) == r.key {
			return true
		}
	}
	for _, l := range c.queue {
		if l.key == r.key {
			return true
		}
	}
	return false
}

// readsFromAgent reports whether another known engine reaches agent name
// (the same engine under another host spelling). wmu is held.
func (c *Consumer) readsFromAgent(name string) bool {
	for _, r := range c.remotes {
		if r.setup == nil {
			continue
		}
		for _, a := range r.setup.agents {
			if a == name {
				return true
			}
		}
	}
	return false
}

// checkGeneration forgets the handshake with the engine of key when a
// request names a registration generation above the one it was made at
// (vLLM's remote_registration_generation): prefill registered its KV cache
// anew, so the agents' metadata this rank loaded may name memory that is
// gone. As vLLM's decode does, the metadata is unloaded at once (a READ
// still in flight through it then fails, never reading memory the new
// registration no longer names) and the next route handshakes again.
// wmu is held.
func (c *Consumer) checkGeneration(key string, gen int) {
	r, ok := c.remotes[key]
	if !ok || gen <= r.generation || !r.ready {
		return
	}
	c.forgetHandshake(r)
	c.unloadAgents(r)
	c.regenerations.Inc()
	c.log.Info("pullconn: prefill registered its KV cache anew; handshaking again", zap.String("remote_engine_id", r.engineID),
		zap.String("addr", r.addr), zap.Int("generation", gen), zap.Int("handshake_generation", r.generation))
}
