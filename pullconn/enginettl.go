package pullconn

import (
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/stats"
)

// engines are the prefill engines a decode rank knows, by key
// (engine id @ address): their handshakes, done or in flight, and the
// loads parked on them.
type engines struct {
	rd                       *reader
	remotes                  map[string]*remote
	forgotten, regenerations *stats.Counter
}

// remoteFor returns the engine's state, starting its handshake if this is
// the first request for it (or the last handshake failed).
func (c *engines) remoteFor(engineID, addr string, tpSize int) *remote {
	key := engineID + "@" + addr
	if r, ok := c.remotes[key]; ok {
		return r
	}
	c.forgetStaleEngines(c.rd.now())
	r := &remote{key: key, engineID: engineID, addr: addr, tp: tpSize}
	if !c.rd.io.handshake(r) {
		return r // not kept: Close ends its loads
	}
	c.remotes[key] = r
	return r
}

// forgetHandshake drops the handshake r, so that the next request to its
// engine handshakes again. Loads still in flight on it keep it.
func (c *engines) forget(r *remote) {
	if c.remotes[r.key] == r {
		delete(c.remotes, r.key)
	}
	c.rd.io.forget(r)
}

// unloadAgents unloads the metadata of r's agents that no other known
// engine reaches (the same engine under another host spelling); the next
// handshake loads it again. r is already forgotten.
func (c *engines) unloadAgents(r *remote) {
	if r.setup == nil {
		return
	}
	for _, name := range r.setup.agents {
		if name != "" && !c.readsFromAgent(name) {
			_ = c.rd.xfer.InvalidateRemoteMD(name)
		}
	}
}

// forgetStaleEngines forgets the prefill engines this rank has had no
// request with for RankConfig.EngineTTL and none in flight (vLLM's
// engine_ttl): their agents' metadata is unloaded and their handshake
// dropped, so a later request to one handshakes again. It runs when the
// rank starts a handshake with another engine, as vLLM's does, so that an
// idle rank does no work for it.
func (c *engines) forgetStaleEngines(now time.Time) {
	if c.rd.cfg.EngineTTL < 0 {
		return
	}
	var stale []*remote
	for _, r := range c.remotes {
		if r.ready && now.Sub(r.lastActive) > c.rd.cfg.EngineTTL && !c.usesEngine(r) {
			stale = append(stale, r)
		}
	}
	for _, r := range stale {
		c.forget(r)
		c.unloadAgents(r)
		c.forgotten.Inc()
		c.rd.log.Info("pullconn: forgot an idle prefill engine", zap.String("remote_engine_id", r.engineID),
			zap.String("addr", r.addr), zap.Duration("idle", now.Sub(r.lastActive)), zap.Duration("engine_ttl", c.rd.cfg.EngineTTL))
	}
}

// usesEngine reports whether anything of this rank still refers to r: a
// load waiting for, reading from or settling with it, a hold query to it,
// or a KeepAlive request of it.
func (c *engines) usesEngine(r *remote) bool {
	if len(r.parked) > 0 || r.querying {
		return true
	}
	for _, set := range [][]*load{c.rd.reading, c.rd.ready, c.rd.draining, c.rd.pins.toPin} {
		for _, l := range set {
			if l.r == r {
				return true
			}
		}
	}
	for l := range c.rd.pins.awaitingPin {
		if l.r == r {
			return true
		}
	}
	return c.rd.io.refers(r.key)
}

// readsFromAgent reports whether another known engine reaches agent name
// (the same engine under another host spelling).
func (c *engines) readsFromAgent(name string) bool {
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
func (c *engines) checkGeneration(key string, gen int) {
	r, ok := c.remotes[key]
	if !ok || gen <= r.generation || !r.ready {
		return
	}
	c.forget(r)
	c.unloadAgents(r)
	c.regenerations.Inc()
	c.rd.log.Info("pullconn: prefill registered its KV cache anew; handshaking again", zap.String("remote_engine_id", r.engineID),
		zap.String("addr", r.addr), zap.Int("generation", gen), zap.Int("handshake_generation", r.generation))
}
