package pushconn

import "time"

// forgetStalePeers forgets the prefill engines this decode rank routed no
// request to for RankConfig.EngineTTL and none of whose requests is live
// or draining (vLLM's engine_ttl): their agents' metadata is unloaded and
// their handshake dropped, so a later request handshakes again. It runs
// when a request names an engine the rank does not know, as vLLM's does
// before a handshake.
func (d *decodeCore) forgetStalePeers(now time.Time) {
	ttl := d.cfg.engineTTL
	if ttl < 0 {
		return
	}
	for key, p := range d.peers {
		if p.busy || len(p.waiting) > 0 || now.Sub(p.lastUsed) <= ttl {
			continue
		}
		d.edge.lock()
		used := d.tracker.usesPrefill(key)
		d.edge.unlock()
		if used {
			continue
		}
		delete(d.peers, key)
		d.edge.forgetHandshake(p.prefill)
		for _, agent := range p.sources {
			if !d.notifiesAgent(agent) {
				_ = d.edge.unloadMD(agent) // loaded again by the next handshake
			}
		}
		d.push.forgotten.Inc()
	}
}

// notifiesAgent reports whether another known prefill engine writes from
// agent (the same engine under another host spelling).
func (d *decodeCore) notifiesAgent(agent string) bool {
	for _, p := range d.peers {
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
