package pushconn

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/nixl"
)

// A decode rank finds a prefill rank gone in two steps. A notification to
// the rank's agent (a registration or a PUSH_CANCEL) fails with the
// agent's disconnect or not-found error: the rank is suspect, and decode
// asks its engine's side channel again (a probe). The probe's answer
// decides:
//
//   - the engine publishes another incarnation of the rank (another agent
//     name, another incarnation number, or other agent metadata), or the
//     address refuses connections (nothing listens there: the engine
//     process is gone): the incarnation decode registered with is dead.
//     Decode unloads its agent's metadata and only then settles every
//     request sent to it: live ones fail with connector.ErrPrefillGone, draining
//     ones (failed or aborted, waiting for the rank's cancel answer) hand
//     their blocks back. New requests go to the new incarnation.
//   - the same incarnation answers, or the probe fails otherwise (a
//     timeout: the host may only be cut off and come back): the rank may
//     still write, so nothing is released early; the cancel resends and
//     the cancel timeout decide, as before.
//
// A rank whose metadata cannot be unloaded is treated as alive.

// suspect records that a notification to an agent of prefill engine p,
// sent under payload via (with source agents names), failed with why, a
// disconnect or not-found error, and starts a probe of the engine unless
// one is in flight or already judges that payload. It reports whether a
// handshake will answer for the engine (requests parked in p.waiting are
// then sent or failed by it). Poller goroutine only.
func (d *decodeCore) suspect(p *decodePeer, via *handshake.Payload, names []string, why error) bool {
	if d.edge.closing() {
		return false // closing: no new handshake starts
	}
	if p.suspect == nil && via != nil {
		p.suspect, p.suspectSources, p.suspectWhy = via, names, why
	}
	if p.busy {
		return true
	}
	p.payload, p.sources = nil, nil // new requests wait for the probe
	d.edge.forgetHandshake(p.prefill)
	p.busy = true
	d.edge.handshake(peerKey(p.prefill), Prefill{EngineID: p.prefill.EngineID, Host: p.prefill.Host, Port: p.prefill.Port, TPSize: tpOf(via)})
	return true
}

func tpOf(pl *handshake.Payload) int {
	if pl == nil {
		return 1
	}
	return pl.TPSize
}

// judgeSuspect decides, from handshake answer s, which agents of the
// suspect incarnation of p are gone, unloads their metadata and settles
// their requests. It reports whether the answer describes the very ranks
// decode knew (no rank replaced), so that the peer keeps its payload.
// Poller goroutine only.
func (d *decodeCore) judgeSuspect(p *decodePeer, s shakeResult) (same bool) {
	old, names, why := p.suspect, p.suspectSources, p.suspectWhy
	p.suspect, p.suspectSources, p.suspectWhy = nil, nil, nil
	if old == nil {
		return false
	}
	dead, reason := d.deadAgents(p, old, names, s)
	if len(dead) == 0 {
		return s.err == nil
	}
	reason = fmt.Sprintf("prefill agent unreachable (%v); %s", why, reason)
	gone := map[string]bool{}
	for _, agent := range dead {
		if d.otherPeerUses(p, agent) {
			// Another entry for the engine (another spelling of its host)
			// may have loaded the new incarnation under this name: a send
			// under this entry's payload may have reached it.
			continue
		}
		err := d.edge.unloadMD(agent)
		if err != nil && !errors.Is(err, nixl.ErrNotFound) {
			d.push.unloadFailed.Inc()
			d.log.Warn("pushconn: prefill rank looks gone but its agent's metadata could not be unloaded: its requests keep their blocks until the rank answers or the cancel timeout",
				zap.String("prefill", p.prefill.EngineID), zap.String("agent", agent), zap.String("reason", reason), zap.Error(err))
			continue
		}
		gone[agent] = true
		d.push.prefillGone.Inc()
	}
	if len(gone) == 0 {
		return false
	}
	goneErr := fmt.Errorf("%w: prefill engine %q: %s", errPrefillGone, p.prefill.EngineID, reason)
	d.edge.lock()
	settled := d.tracker.prefillGone(d.edge.now(), old, gone, goneErr)
	d.edge.unlock()
	for _, g := range settled {
		msg := "pushconn: prefill rank is gone: failed the request (its blocks go back once no other prefill rank can write)"
		if g.released {
			msg = "pushconn: prefill rank is gone: released the ended request's blocks (its metadata is unloaded, no WRITE of it can land)"
		}
		d.log.Warn(msg, zap.String("request", g.id), zap.String("prefill", p.prefill.EngineID),
			zap.Strings("agents", g.agents), zap.String("reason", reason))
	}
	if len(settled) > 0 {
		d.edge.signal()
	}
	return false
}

// deadAgents returns the agents of incarnation old (source agents names,
// in stageSources order) that answer s shows gone, and why.
func (d *decodeCore) deadAgents(p *decodePeer, old *handshake.Payload, names []string, s shakeResult) ([]string, string) {
	addr := joinAddr(p.prefill.Host, p.prefill.Port)
	if s.err != nil {
		if errors.Is(s.err, syscall.ECONNREFUSED) {
			return names, fmt.Sprintf("engine %q at %s refuses connections (nothing listens there: the engine is gone)", p.prefill.EngineID, addr)
		}
		return nil, ""
	}
	ranks, err := stageSources(p.prefill.EngineID, old, d.cfg.layout)
	if err != nil || len(ranks) != len(names) {
		return nil, ""
	}
	var dead, why []string
	for i, w := range ranks {
		if d := replaced(old, s.payload, w); d != "" {
			dead = append(dead, names[i])
			why = append(why, fmt.Sprintf("rank %d (agent %q): %s", w, names[i], d))
		}
	}
	if len(dead) == 0 {
		return nil, ""
	}
	return dead, fmt.Sprintf("engine %q at %s restarted: %s", p.prefill.EngineID, addr, strings.Join(why, "; "))
}

// replaced says how world rank w of fresh is another incarnation than in
// old ("" when it is the same one).
func replaced(old, fresh *handshake.Payload, w int) string {
	if fresh.TPSize != old.TPSize || fresh.PPSize != old.PPSize || w >= len(fresh.Ranks) || w >= len(old.Ranks) {
		return fmt.Sprintf("the engine now has TP %d x PP %d ranks, not %d x %d", fresh.TPSize, fresh.PPSize, old.TPSize, old.PPSize)
	}
	o, f := &old.Ranks[w], &fresh.Ranks[w]
	switch {
	case o.Agent != f.Agent:
		return fmt.Sprintf("now published by agent %q", f.Agent)
	case o.Incarnation != 0 || f.Incarnation != 0:
		if o.Incarnation != f.Incarnation {
			return fmt.Sprintf("incarnation %#x replaced by %#x", o.Incarnation, f.Incarnation)
		}
		return ""
	case !bytes.Equal(o.Metadata, f.Metadata):
		return "its agent metadata changed"
	}
	return ""
}

// otherPeerUses reports whether an engine entry other than p sends to
// agent under its current handshake.
func (d *decodeCore) otherPeerUses(p *decodePeer, agent string) bool {
	for _, q := range d.peers {
		if q == p {
			continue
		}
		for _, a := range q.sources {
			if a == agent {
				return true
			}
		}
	}
	return false
}

// resendAfterProbe handles a registration of r whose send to an agent of
// p failed with a disconnect or not-found error err: the incarnation
// decode knew is suspect and a probe asks the engine again. When no agent
// had been handed the registration yet (first), r waits for the probe and
// goes out once more, to whatever incarnation the probe finds (once per
// request): it reports true then, and the caller leaves r alone.
func (d *decodeCore) resendAfterProbe(p *decodePeer, r *decodeReq, first bool, err error) bool {
	via, names := p.payload, p.sources
	d.edge.lock()
	retry := first && !r.resent && d.tracker.live(r)
	if retry {
		// Nothing reached a prefill rank: the request waits as if it had
		// never been sent.
		r.resent = true
		r.sources, r.via, r.viaSources = nil, nil, nil
	}
	d.edge.unlock()
	if !d.suspect(p, via, names, err) {
		return false
	}
	if retry {
		p.waiting = append(p.waiting, r)
	}
	return retry
}

// cancelUndeliverable handles a PUSH_CANCEL of draining request id that
// could not be sent, with a disconnect or not-found error err: the
// incarnation its registration went to is suspect.
func (d *decodeCore) cancelUndeliverable(id string, err error) {
	d.edge.lock()
	r := d.tracker.draining[id]
	var (
		via   *handshake.Payload
		names []string
		key   string
	)
	if r != nil {
		via, names, key = r.via, r.viaSources, peerKey(r.prefill)
	}
	d.edge.unlock()
	if via == nil {
		return
	}
	if p := d.peers[key]; p != nil {
		d.suspect(p, via, names, err)
	}
}
