package pushconn

import (
	"errors"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/pushconn/internal/match"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// cancels is the writer core's handling of decode's PUSH_CANCEL: its own
// type, over the core's state, so that the core stays one concern.
type cancels struct{ *writeCore }

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
func (c cancels) onCancel(sender string, msg []byte) {
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
func (c cancels) cancel(sender string, cn *pushwire.Cancel) (*decodeEngine, *pushwire.Registration, cancelState) {
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
