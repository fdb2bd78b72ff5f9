package pushconn

import (
	"fmt"
	"slices"

	"github.com/gonixl/gonixl/pushconn/internal/match"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// The writer core's registrations and cancels: admitting a registration
// into the matcher once its decode engine is known, and answering decode's
// PUSH_CANCEL.

// admit checks a registration against the decode engine's payload and
// gives it to the matcher; a match starts the WRITE.
func (c *writeCore) admit(de *decodeEngine, r parkedReg) {
	sender, reg, received := r.sender, r.reg, r.received
	if de.payload == nil { // dropped meanwhile (see below): wait for the fresh one
		c.peers.park(de, r)
		c.peers.handshake(de)
		return
	}
	rank, ok := de.targets[sender]
	if !ok && c.peers.strangerSender(de, r) {
		return
	}
	if ok {
		cur := de.payload.Ranks[rank].Incarnation
		if inc := reg.DecodeIncarnation; inc != 0 && cur != 0 && inc != cur {
			if r.refetched || slices.Contains(de.retired, inc) {
				// From an instance that is gone: its blocks are not
				// the new instance's, and a PUSH_FAIL would reach the
				// new instance, which may hold a request of that id.
				c.dropStale(&pendingReg{reg: reg, sender: sender, peer: de, incarnation: inc}, nil)
				return
			}
			// Either the rank restarted since the payload was fetched, or
			// this is a late registration from a dead instance: a fresh
			// handshake tells which.
			c.peers.forget(de)
			r.refetched = true
			c.peers.park(de, r)
			c.peers.handshake(de)
			return
		}
	}
	var why string
	switch {
	case !ok:
		c.push.misdirected.Inc()
		why = fmt.Sprintf("prefill rank %d does not write into decode agent %q", c.cfg.layout.WorldRank(), sender)
	case reg.RemoteTPSize != c.cfg.tpSize:
		why = fmt.Sprintf("registration says prefill TP size %d, engine %q has %d", reg.RemoteTPSize, c.cfg.engineID, c.cfg.tpSize)
	case reg.RemotePPSize != c.cfg.ppSize:
		why = fmt.Sprintf("registration says prefill PP size %d, engine %q has %d", reg.RemotePPSize, c.cfg.engineID, c.cfg.ppSize)
	case reg.DecodeTPSize != de.payload.TPSize:
		why = fmt.Sprintf("registration says decode TP size %d, its handshake says %d", reg.DecodeTPSize, de.payload.TPSize)
	case len(reg.LocalBlockIDs) != len(c.cfg.layout.GroupList()):
		why = fmt.Sprintf("registration has %d KV-cache groups, the prefill layout %d", len(reg.LocalBlockIDs), len(c.cfg.layout.GroupList()))
	}
	if why != "" {
		c.out.fail(sender, reg, pushwire.FailLayout, why)
		return
	}
	key := match.Key{RequestID: reg.RequestID, TransferID: reg.TransferID}
	pr := &pendingReg{reg: reg, sender: sender, peer: de, rank: rank, incarnation: de.payload.Ranks[rank].Incarnation, metadata: de.payload.Ranks[rank].Metadata}
	m, out, err := c.matcher.Register(received, sender, key, reg.Seq, len(de.targets), pr)
	if m.Superseded {
		// The same request id registered again by the same decode rank:
		// the earlier registration is over on decode (its result is out),
		// so it is neither written nor told anything.
		m.Replaced.peer.refs--
		c.push.superseded.Inc()
	}
	if out == match.Pending && c.mem.lapsed.has(key) {
		// Nothing live pairs with it, and the request it names had its
		// blocks freed when their lease ran out: nothing will come, so
		// decode hears it now, not at its registration timeout.
		c.matcher.Withdraw(sender, key)
		c.push.afterLease.Inc()
		c.out.fail(sender, reg, pushwire.FailExpired,
			fmt.Sprintf("prefill freed the request's blocks when their lease (%v) ran out before this registration arrived", c.cfg.lease))
		return
	}
	switch {
	case err != nil:
		c.out.fail(sender, reg, pushwire.FailLayout, err.Error())
	case out == match.Duplicate:
		c.push.duplicates.Inc()
	case out == match.Pending:
		de.refs++
		progressWriter{c}.progressed(pr)
	case out == match.Matched:
		de.refs++
		c.push.countMatch(m.Kind)
		h := m.Fin
		if m.Last {
			h.inMatcher = false
		}
		h.writes++
		c.startWrite(pr, h)
	}
}
