package pushconn

import (
	"slices"
	"strings"

	"go.uber.org/zap"
)

// A prefill rank finds a decode engine restarted (killed, then started
// again at the same address with the same engine id) in one of three
// ways, and each ends in a fresh handshake:
//
//   - a registration comes from an agent that the cached handshake does
//     not name at any rank: a real engine names its agents anew at every
//     start (vLLM a uuid each, the reference engine a start stamp), so
//     this is the common case, in both protocols;
//   - a registration names another decode_incarnation than the cached
//     handshake (gonixl's protocol; the agent kept its name);
//   - a WRITE or notification to a decode agent fails with the agent's
//     disconnect or not-found error (vLLM's protocol, agent name kept).
//
// The fresh handshake decides (noteRestart): when it shows other agents
// or other incarnations than the payload it replaces, the engine
// restarted. The rank counts it (decode_restarts), logs it, and unloads
// the metadata of the old agents that the new instance does not reuse
// (once no WRITE into them is in flight). What the rank still owed the
// dead instance ends without a byte landing in the new one: its waiting
// and matched registrations are dropped unwritten when their request
// finishes or they expire (stale_registrations; their prefill blocks are
// freed exactly once, as for any ended registration), and a WRITE in
// flight into a dead agent fails or times out and is freed when the agent
// lets go of it.

// strangerSender handles registration r whose sender is not among de's
// targets. A known dead agent's registration is dropped; one from an agent
// the payload does not name at all, seen for the first time, drops the
// payload and waits for a fresh handshake (which admits it again). It
// reports whether it took r; otherwise admit goes on, and refuses r as
// misdirected.
func (ps *decodePeers) strangerSender(de *decodeEngine, r parkedReg) bool {
	inc := r.reg.DecodeIncarnation
	if slices.Contains(de.dead, r.sender) || (inc != 0 && slices.Contains(de.retired, inc)) {
		// A late registration of an instance that is gone: a PUSH_FAIL
		// would go nowhere (or to an agent that took the name since).
		ps.stale(&pendingReg{reg: r.reg, sender: r.sender, peer: de, incarnation: inc})
		return true
	}
	if r.refetched || de.names(r.sender) {
		return false
	}
	ps.log.Info("pushconn: registration from a decode agent the cached handshake does not name: handshaking again (the engine may have restarted)",
		zap.String("decode", de.engineID), zap.String("addr", de.addr), zap.String("sender", r.sender),
		zap.String("decode_request", r.reg.RequestID))
	ps.forget(de)
	r.refetched = true
	ps.park(de, r)
	ps.handshake(de)
	return true
}

// names reports whether de's payload publishes agent at any rank.
func (de *decodeEngine) names(agent string) bool {
	for i := range de.payload.Ranks {
		if de.payload.Ranks[i].Agent == agent {
			return true
		}
	}
	return false
}

// noteRestart compares the payload a handshake just accepted for de with
// the one forget dropped before it: other agents or incarnations mean the
// engine restarted. The agents gone with it are remembered as dead and
// their metadata unloaded (once no WRITE into them is in flight).
func (ps *decodePeers) noteRestart(de *decodeEngine) {
	prev, prevTargets := de.prev, de.prevTargets
	de.prev, de.prevTargets = nil, nil
	if prev == nil {
		return
	}
	var gone, why []string
	for _, agent := range sortedAgents(prevTargets) {
		if _, ok := de.targets[agent]; !ok {
			gone = append(gone, agent)
			why = append(why, "agent "+agent+" gone")
			continue
		}
		if d := replaced(prev, de.payload, prevTargets[agent]); d != "" {
			why = append(why, "agent "+agent+": "+d)
		}
	}
	// An agent name the new instance uses is alive again.
	de.dead = slices.DeleteFunc(de.dead, func(a string) bool { _, ok := de.targets[a]; return ok })
	if len(why) == 0 {
		return // the same instance: only its metadata had been dropped
	}
	ps.push.decodeRestarts.Inc()
	ps.log.Warn("pushconn: decode engine restarted: handshook with its new instance; what the old one registered is dropped unwritten",
		zap.String("decode", de.engineID), zap.String("addr", de.addr), zap.Strings("old_agents", sortedAgents(prevTargets)),
		zap.Strings("new_agents", sortedAgents(de.targets)), zap.String("reason", strings.Join(why, "; ")))
	for _, agent := range gone {
		if !slices.Contains(de.dead, agent) {
			de.dead = append(de.dead, agent)
		}
		if !slices.Contains(de.unload, agent) {
			de.unload = append(de.unload, agent)
		}
	}
	if n := len(de.dead) - retiredCap; n > 0 {
		de.dead = append(de.dead[:0], de.dead[n:]...)
	}
	if len(de.unload) > 0 {
		if ps.unloading == nil {
			ps.unloading = map[*decodeEngine]bool{}
		}
		ps.unloading[de] = true
		ps.unloadWhenIdle()
	}
}

// writingInto reports whether a WRITE into agent is in flight.
func (ps *decodePeers) writingInto(agent string) bool {
	for _, wr := range *ps.inflight {
		if wr.reg.sender == agent {
			return true
		}
	}
	return false
}

func sortedAgents(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
