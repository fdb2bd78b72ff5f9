package pushconn

import (
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// regMemory is what a prefill rank's writer core remembers of
// registrations after they are gone, each for its registration timeout
// (ttl), so that a late or repeated message about one is never taken for
// a new registration whose blocks decode still holds.
type regMemory struct {
	ttl  time.Duration
	log  *zap.Logger
	push *pushCounters
	// lapsed: finished requests whose lease ran out.
	lapsed *lapsed
	// cancelled: registrations decode cancelled before their request
	// finished, so that request is freed at once, without a WRITE.
	cancelled *cancelledRegs
	// seen: registrations received, so a late copy of one is dropped.
	seen *seenRegs
	// cancelledUnseen: registrations whose PUSH_CANCEL came before them
	// (the PUSH_REG delayed or duplicated by the network); decode handed
	// their blocks back at the ack, so they must never be admitted.
	cancelledUnseen *seenRegs
	// seqless: registrations without a registration_seq that the rank
	// ended without a WRITE (cancelled, failed), so a late copy of one is
	// dropped; a seq tells copies from new registrations, without one
	// only the block ids can.
	seqless *seqlessEnded
	// noSeqless turns the seq-less memory off, as before c653a90; only the
	// simulation sets it (sim_test.go, legacy rules).
	noSeqless bool
}

func newRegMemory(ttl time.Duration, log *zap.Logger, push *pushCounters) regMemory {
	return regMemory{ttl: ttl, log: log, push: push, lapsed: newLapsed(expiredCap), cancelled: newCancelledRegs(cancelledCap),
		seen: newSeenRegs(seenCap), cancelledUnseen: newSeenRegs(seenCap), seqless: newSeqlessEnded(seqlessEndedCap)}
}

// dropped reports whether registration reg from sender must be dropped
// unanswered, as a copy of one already received or ended, or one whose
// cancel came first (and was acknowledged: decode has its blocks back).
// A registration it lets through is remembered as seen.
func (m *regMemory) dropped(now time.Time, sender string, reg *pushwire.Registration) bool {
	if reg.Seq == 0 && !m.noSeqless {
		switch m.seqless.copyOf(now, sender, reg) {
		case copyOfEnded:
			// Decode was told it ends here (PUSH_CANCEL_ACK, PUSH_FAIL)
			// and took its blocks back; a WRITE would land in reused ones.
			m.push.seqlessCopies.Inc()
			m.log.Debug("pushconn: dropped a copy of a seq-less registration the rank ended without a WRITE", zap.String("sender", sender), zap.String("request", reg.RequestID))
			return true
		case copyCancelledFirst:
			m.push.cancelledFirst.Inc()
			m.log.Debug("pushconn: dropped a seq-less registration cancelled before it arrived", zap.String("sender", sender), zap.String("request", reg.RequestID))
			return true
		}
	}
	if reg.Seq != 0 && m.cancelledUnseen.has(now, sender, reg.RequestID, reg.TransferID, 0, reg.Seq) {
		// Its cancel came first and was acknowledged: decode's blocks are
		// back with its engine.
		m.push.cancelledFirst.Inc()
		m.log.Debug("pushconn: dropped a registration cancelled before it arrived", zap.String("sender", sender), zap.String("request", reg.RequestID))
		return true
	}
	if reg.Seq != 0 && m.seen.check(now, sender, reg.RequestID, reg.TransferID, reg.DecodeIncarnation, reg.Seq, now.Add(m.ttl)) {
		// A copy of a registration already received: the original may be
		// over and its blocks back with decode's engine.
		m.push.duplicates.Inc()
		m.log.Debug("pushconn: dropped a copy of a registration already received", zap.String("sender", sender), zap.String("request", reg.RequestID))
		return true
	}
	return false
}

// ended remembers a seq-less registration the rank ended without a WRITE
// (decode takes its blocks back when it hears so), so a late copy of it is
// never admitted.
func (m *regMemory) ended(now time.Time, sender string, reg *pushwire.Registration) {
	if reg.Seq == 0 && !m.noSeqless {
		m.seqless.ended(sender, reg, now.Add(m.ttl))
	}
}

// cancelledUnheld remembers a PUSH_CANCEL for a registration the rank does
// not hold: never received, perhaps, so the registration may still be on
// its way, and decode reuses the blocks once the ack is in.
func (m *regMemory) cancelledUnheld(now time.Time, sender string, c *pushwire.Cancel) {
	switch {
	case c.Seq != 0:
		// (The cancel carries no incarnation; the seq starts at random
		// for every decode start, so another instance's registration is
		// not caught by it but for a 2^-64 chance, which would only make
		// that one time out.)
		m.cancelledUnseen.check(now, sender, c.RequestID, c.TransferID, 0, c.Seq, now.Add(m.ttl))
	case !m.noSeqless:
		// The same for a seq-less registration; the cancel names no
		// blocks, so any seq-less registration of these ids from the
		// sender is refused until the timeout.
		m.seqless.cancelledUnseen(sender, c.RequestID, c.TransferID, now.Add(m.ttl))
	}
}
