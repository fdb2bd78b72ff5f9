package pushconn

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/nixl"
)

// decodePeers is the decode engines a prefill rank knows, part of its
// writer core (writeCore): their handshakes, the registrations parked for
// them, and the metadata of their agents, loaded and unloaded through the
// core's edge.
type decodePeers struct {
	edge   writeEdge
	log    *zap.Logger
	push   *pushCounters
	byKey  map[string]*decodeEngine
	parked int // registrations parked over all peers
	// inflight is the core's WRITEs in flight: an agent's metadata is
	// not unloaded under one.
	inflight *[]*write
	// unloading: decode engines with dead agents whose metadata waits for
	// WRITEs in flight to end (decodeEngine.unload).
	unloading map[*decodeEngine]bool
}

// park holds a registration until de's handshake is done.
func (ps *decodePeers) park(de *decodeEngine, r parkedReg) {
	de.parked = append(de.parked, r)
	ps.parked++
}

// handshake starts fetching a decode engine's payload, unless a fetch is
// already in flight; the result comes back as writeCore.handshakeDone.
func (ps *decodePeers) handshake(de *decodeEngine) {
	if de.busy {
		return
	}
	de.busy = true
	ps.edge.handshake(de)
}

// evictIdle forgets the least recently used decode engine that nothing
// refers to, with its cached handshake and its agents' metadata; it
// reports whether there was one. A later registration from it handshakes
// again.
func (ps *decodePeers) evictIdle() bool {
	var victim *decodeEngine
	for _, de := range ps.byKey {
		if de.idle() && (victim == nil || de.lastUsed.Before(victim.lastUsed)) {
			victim = de
		}
	}
	if victim == nil {
		return false
	}
	ps.drop(victim)
	ps.push.evicted.Inc()
	return true
}

// drop forgets decode engine de with its cached handshake and its
// agents' metadata; a later registration from it handshakes again.
func (ps *decodePeers) drop(de *decodeEngine) {
	delete(ps.byKey, de.key)
	delete(ps.unloading, de)
	ps.edge.forgetHandshake(de)
	for _, agent := range de.unload {
		if !ps.writesInto(agent) {
			_ = ps.edge.unloadMD(agent)
		}
	}
	for agent := range de.targets {
		if !ps.writesInto(agent) { // another entry may reach the same engine under another host spelling
			_ = ps.edge.unloadMD(agent) // loaded again by its next handshake
		}
	}
}

// dropStale forgets the decode engines that nothing of the rank refers to
// and that registered nothing for ttl (RankConfig.EngineTTL, vLLM's
// engine_ttl; negative: never). It runs when a registration comes from an
// engine the rank does not know, as vLLM's does before a handshake.
func (ps *decodePeers) dropStale(now time.Time, ttl time.Duration) {
	if ttl < 0 {
		return
	}
	for _, de := range ps.byKey {
		if de.idle() && now.Sub(de.lastUsed) > ttl {
			ps.drop(de)
			ps.push.forgotten.Inc()
		}
	}
}

// writesInto reports whether a decode engine entry of this rank still
// writes into agent.
func (ps *decodePeers) writesInto(agent string) bool {
	return ps.of(agent) != nil
}

// of returns the decode engine entry that writes into agent, if any.
func (ps *decodePeers) of(agent string) *decodeEngine {
	for _, de := range ps.byKey {
		if _, ok := de.targets[agent]; ok {
			return de
		}
	}
	return nil
}

// forgetIfGone drops a decode engine's handshake when err says its agents
// are gone (it restarted or left), so its next registration handshakes
// again instead of using stale metadata.
func (ps *decodePeers) forgetIfGone(de *decodeEngine, err error) {
	if peerGone(err) {
		ps.forget(de)
	}
}

// forget drops a decode engine's payload, here and in the engine's
// handshake cache, and retires its incarnations.
func (ps *decodePeers) forget(de *decodeEngine) {
	if de.payload == nil {
		return
	}
	for _, r := range de.payload.Ranks {
		if r.Incarnation != 0 && !slices.Contains(de.retired, r.Incarnation) {
			de.retired = append(de.retired, r.Incarnation)
		}
	}
	if n := len(de.retired) - retiredCap; n > 0 {
		de.retired = append(de.retired[:0], de.retired[n:]...)
	}
	if de.prev == nil { // the last payload a handshake confirmed
		de.prev, de.prevTargets = de.payload, de.targets
	}
	de.payload, de.targets = nil, nil
	ps.edge.forgetHandshake(de)
}

// unloadWhenIdle unloads the metadata of dead decode agents that no WRITE
// in flight uses any more (NIXL must not lose an agent's metadata under a
// transfer it still holds). An agent that another decode engine entry of this rank
// writes into (the same engine under another host spelling) is left to
// that entry.
func (ps *decodePeers) unloadWhenIdle() {
	for de := range ps.unloading {
		kept := de.unload[:0]
		for _, agent := range de.unload {
			switch {
			case ps.writingInto(agent):
				kept = append(kept, agent)
			case ps.writesInto(agent):
			default:
				err := ps.edge.unloadMD(agent)
				if err != nil && !errors.Is(err, nixl.ErrNotFound) {
					ps.log.Warn("pushconn: could not unload a dead decode agent's metadata",
						zap.String("decode", de.engineID), zap.String("agent", agent), zap.Error(err))
				}
			}
		}
		clear(de.unload[len(kept):])
		de.unload = kept
		if len(kept) == 0 {
			delete(ps.unloading, de)
		}
	}
}

// accept checks that a rank of layout can write into the decode engine and
// loads the metadata of the decode ranks it writes into.
func (ps *decodePeers) accept(de *decodeEngine, pl *handshake.Payload, layout *descriptors.Layout) error {
	if pl.PPSize != 1 {
		return fmt.Errorf("%w: decode engine %q has PP size %d: pipeline-parallel decode is not supported", connector.ErrIncompatible, de.engineID, pl.PPSize)
	}
	dst := &pl.Ranks[0].Layout
	if err := descriptors.Compatible(layout, dst); err != nil {
		return fmt.Errorf("%w: decode engine %q: %v", connector.ErrIncompatible, de.engineID, err)
	}
	ranks, err := descriptors.Targets(layout, dst)
	if err != nil {
		return fmt.Errorf("%w: decode engine %q: %v", connector.ErrIncompatible, de.engineID, err)
	}
	targets := make(map[string]int, len(ranks))
	for _, r := range ranks {
		name, err := ps.edge.loadMD(pl.Ranks[r].Agent, pl.Ranks[r].Metadata)
		if err != nil {
			return fmt.Errorf("%w: decode engine %q rank %d: load agent metadata: %v", connector.ErrHandshake, de.engineID, r, err)
		}
		targets[name] = r
	}
	de.payload, de.targets = pl, targets
	return nil
}

// stale counts and logs a registration of a decode rank instance that
// has since restarted under the same name: nothing is written, and no
// PUSH_FAIL is sent, because the instance that could use it is gone and
// the agent of that name is the new instance's.
func (ps *decodePeers) stale(pr *pendingReg) {
	ps.push.stale.Inc()
	ps.log.Info("pushconn: dropped a registration from a decode instance that restarted",
		zap.String("decode", pr.peer.engineID), zap.String("sender", pr.sender),
		zap.String("decode_request", pr.reg.RequestID), zap.Uint64("incarnation", pr.incarnation))
}

// takeRewrites removes and returns the matched WRITEs of h that wait for a
// fresh handshake, of every decode engine.
func (ps *decodePeers) takeRewrites(h *hold) []rewrite {
	var out []rewrite
	for _, de := range ps.byKey {
		kept := de.rewrites[:0]
		for _, r := range de.rewrites {
			if r.hold == h {
				out = append(out, r)
			} else {
				kept = append(kept, r)
			}
		}
		de.rewrites = kept
	}
	return out
}
