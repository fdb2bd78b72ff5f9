package pushconn

import "time"

// forgetStalePeers forgets the prefill engines this decode rank routed no
// request to for RankConfig.EngineTTL and none of whose requests is live
// or draining (vLLM's engine_ttl): their agents' metadata is unloaded and
// their handshake dropped, so a later request handshakes again. It runs
// when a request names an engine the rank does not know, as vLLM's does
// before a handshake.
func (c *Consumer) forgetStalePeers(now time.Time) {
	ttl := c.cfg.EngineTTL
	if ttl < 0 {
		return
	}
	for key, p := range c.peers {
		if p.busy || len(p.waiting) > 0 || now.Sub(p.lastUsed) <= ttl {
			continue
		}
		c.mu.Lock()
		used := c.tracker.usesPrefill(key)
		c.mu.Unlock()
		if used {
			continue
		}
		delete(c.peers, key)
		c.engine.core.Client().Forget(p.prefill.EngineID, c.engine.addr(p.prefill.Host, p.prefill.Port))
		for _, agent := range p.sources {
			if !c.notifiesAgent(agent) {
				_ = c.cfg.Agent.InvalidateRemoteMD(agent) // loaded again by the next handshake
			}
		}
		c.push.forgotten.Inc()
	}
}

// notifiesAgent reports whether another known prefill engine writes from
// agent (the same engine under another host spelling).
func (c *Consumer) notifiesAgent(agent string) bool {
	for _, p := range c.peers {
		for _, a := range p.sources {
			if a == agent {
				return true
			}
		}
	}
	return false
}

// usesPrefill reports whether a live or draining request names the prefill
// engine of peer key.
func (t *tracker) usesPrefill(key string) bool {
	for _, r := range t.reqs {
		if peerKey(r.prefill) == key {
			return true
		}
	}
	for _, r := range t.draining {
		if peerKey(r.prefill) == key {
			return true
		}
	}
	return false
}
