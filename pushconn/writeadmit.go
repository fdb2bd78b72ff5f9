package pushconn

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

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
		c.progressed(pr)
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

// onCancel handles decode's PUSH_CANCEL: the request ended on decode, whose
// engine reuses the blocks once this rank has acknowledged, so this rank
// must not write them. A registration still waiting for its request
// leaves the matcher and is remembered (its request is then freed without
// a WRITE when it finishes and no live registration pairs with it); one
// waiting for a handshake or for a retry is dropped; all three are
// acknowledged at once (PUSH_CANCEL_ACK; after the handshake for one that
// waited for it). A WRITE in flight cannot be called back: it is
// acknowledged when it ends (completed, failed, or cancelled at the write
// timeout). A cancel for a registration the rank does not hold (written,
// failed, or never received) is acknowledged at once too.
func (c *writeCore) onCancel(sender string, msg []byte) {
	cn, err := pushwire.DecodeCancel(msg)
	if err != nil {
		if errors.Is(err, pushwire.ErrTooLong) {
			c.push.oversized.Inc()
		}
		c.stats.MalformedNotifications.Inc()
		c.log.Warn("pushconn: dropped a malformed PUSH_CANCEL", zap.String("sender", sender), zap.Error(err))
		return
	}
	c.push.cancelReceived.Inc()
	switch de, reg, st := c.cancel(sender, cn); st {
	case cancelDropped:
		c.push.cancelDropped.Inc()
		// Decode takes the blocks back at the ack: a copy of a seq-less
		// registration must not be admitted after.
		c.mem.ended(c.edge.now().wall, sender, reg)
		c.out.ack(de, sender, cn)
	case cancelInFlight:
		// Answered when the WRITE ends.
	default:
		c.log.Debug("pushconn: PUSH_CANCEL for no waiting registration (written, failed or never received)",
			zap.String("sender", sender), zap.String("decode_request", cn.RequestID))
		c.mem.cancelledUnheld(c.edge.now().wall, sender, cn)
		c.out.ack(c.peers.of(sender), sender, cn)
	}
}

// cancelState is what a PUSH_CANCEL found.
type cancelState int

const (
	cancelNone     cancelState = iota // no registration of it held
	cancelDropped                     // dropped before its WRITE started
	cancelInFlight                    // its WRITE is in flight
)

// cancel drops sender's registration named by cn and reports what it
// found, with the decode engine entry it belongs to and, when it dropped
// one, the registration.
func (c *writeCore) cancel(sender string, cn *pushwire.Cancel) (*decodeEngine, *pushwire.Registration, cancelState) {
	// A cancel that names its registration's seq cancels only that one: an
	// earlier registration's cancel, late or repeated, must not withdraw
	// (or answer for) a newer registration of the same id.
	same := func(reg *pushwire.Registration) bool {
		return reg.RequestID == cn.RequestID && reg.TransferID == cn.TransferID && (cn.Seq == 0 || reg.Seq == cn.Seq)
	}
	key := match.Key{RequestID: cn.RequestID, TransferID: cn.TransferID}
	if pr, ok := c.matcher.Pending(sender, key); ok && same(pr.reg) {
		c.matcher.Withdraw(sender, key)
		// Out of the matcher, so it takes no match from a retry's live
		// registration; remembered, so its request is freed at once.
		pr.peer.refs--
		c.mem.cancelled.add(key, c.edge.now().wall.Add(c.cfg.registrationTimeout))
		if wr := pr.partial; wr != nil {
			// A progressive WRITE of it is in flight: answered when it ends.
			c.mem.ended(c.edge.now().wall, sender, pr.reg)
			wr.acks = append(wr.acks, cn)
			return pr.peer, nil, cancelInFlight
		}
		return pr.peer, pr.reg, cancelDropped
	}
	for _, wr := range c.inflight {
		if wr.reg.sender == sender && same(wr.reg.reg) {
			wr.acks = append(wr.acks, cn)
			return wr.reg.peer, nil, cancelInFlight
		}
	}
	for _, de := range c.peers.byKey {
		for i, r := range de.parked {
			if r.sender == sender && same(r.reg) {
				de.parked = append(de.parked[:i], de.parked[i+1:]...)
				c.peers.parked--
				return de, r.reg, cancelDropped
			}
		}
		for i, r := range de.rewrites {
			if r.reg.sender == sender && same(r.reg.reg) {
				de.rewrites = append(de.rewrites[:i], de.rewrites[i+1:]...)
				c.endWrite(r.reg, r.hold)
				return de, r.reg.reg, cancelDropped
			}
		}
	}
	return nil, nil, cancelNone
}
