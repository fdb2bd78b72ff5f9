package pullconn

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/stats"
)

// A decode rank reports a load done only once prefill pinned, for this
// decode engine, exactly the hold the Params name (handshake.HoldRef: id
// and a digest of the blocks, deadline and staging slot), and the load's
// READs ended within the pin. The pin is asked on the side channel as the
// READs are posted and travels beside them. While it lasts, prefill
// releases the hold only on completions that name it (the ones decode
// sends once done), not at its lease; it is timed on both sides by the
// monotonic clock, which no wall-clock step moves: decode's READs ended
// before pinSent + TransferTimeout on decode's monotonic clock, and prefill
// holds until at least its receipt of the pin + TransferTimeout +
// ExpiryMargin on its own, which is later. A hold prefill released, let
// expire, never had, holds with other blocks or for another engine is
// answered "not held", so forged or replayed Params and a rank whose
// staging copy failed never give a done result.

// pinState is where a load's pin stands.
type pinState uint8

const (
	pinPending pinState = iota // asked, or to be asked; no answer yet
	pinGranted                 // every prefill rank it names pinned the hold
)

// pinner is a decode rank's pins: the loads whose pin the next
// confirmation asks for, and those whose READs ended before their pin
// was answered.
type pinner struct {
	rd          *reader
	toPin       []*load
	awaitingPin map[*load]struct{}
	notHeld     *stats.Counter
}

// verdicts is a confirmation's outcome for the loads it asked about.
type verdicts struct {
	r     *remote
	loads []*load
	why   []string // one per load; "" confirmed
	clock handshake.Clock
	err   error
}

// askPins sends, per prefill engine, one pin request for the loads
// whose READs were posted since the last tick.
func (c *pinner) askPins() {
	if len(c.toPin) == 0 {
		return
	}
	// Grouped by engine state, not looked up in the engines table: an engine
	// forgotten since (its agent disconnected) still answers for the
	// READs it was asked to cover.
	by := map[*remote][]*load{}
	var order []*remote
	for _, l := range c.toPin {
		if l.ended {
			continue
		}
		if by[l.r] == nil {
			order = append(order, l.r)
		}
		by[l.r] = append(by[l.r], l)
	}
	clear(c.toPin)
	c.toPin = c.toPin[:0]
	for _, r := range order {
		c.askPin(r, by[r])
	}
}

// askPin asks engine r to pin the holds of loads, the pin timed from now
// on this process's monotonic clock.
func (c *pinner) askPin(r *remote, loads []*load) {
	refs := make([]handshake.HoldRef, len(loads))
	pin := (c.rd.cfg.TransferTimeout + c.rd.cfg.ExpiryMargin).Microseconds()
	if c.rd.rules.shortPin != 0 {
		pin = c.rd.rules.shortPin.Microseconds()
	}
	now := c.rd.steady() // before the request leaves: the pin ends later
	for i, l := range loads {
		l.pinSent = now
		refs[i] = handshake.HoldRef{ID: l.p.RemoteRequestID, Key: l.hold, N: c.rd.cfg.Layout.TPSize, Ranks: r.setup.notify, PinMicros: pin}
	}
	// Not started after Close: Close fails the loads.
	c.rd.io.confirm(r, loads, refs)
}

// applyVerdicts records the pins a confirmation granted, finishing the
// loads whose READs already ended, and fails with ErrNotHeld the loads
// prefill did not pin or could not be asked about.
func (c *pinner) applyVerdicts(v verdicts) {
	if v.err == nil && v.clock != (handshake.Clock{}) {
		v.r.clock = v.clock
	}
	for i, l := range v.loads {
		delete(c.awaitingPin, l)
		if l.ended {
			continue // aborted, closed or its scatter failed meanwhile
		}
		switch {
		case v.err != nil:
			c.notHeld.Inc()
			c.rd.fail(l, fmt.Errorf("%w: request %q: prefill engine %q could not confirm that it still held request %q: %w", ErrNotHeld, l.id, l.p.RemoteEngineID, l.p.RemoteRequestID, v.err))
		case v.why[i] != "":
			c.notHeld.Inc()
			c.rd.log.Warn("pullconn: prefill did not confirm the hold; the bytes read are not trusted", zap.String("request_id", l.id), zap.String("remote_request_id", l.p.RemoteRequestID), zap.String("why", v.why[i]))
			c.rd.fail(l, fmt.Errorf("%w: request %q: prefill engine %q does not hold request %q as its Params say (%s)", ErrNotHeld, l.id, l.p.RemoteEngineID, l.p.RemoteRequestID, v.why[i]))
		default:
			l.pin = pinGranted
			if !l.readsEnded.IsZero() {
				c.pinnedReadEnded(l)
			}
		}
	}
}

// pinnedReadEnded finishes a load whose READs ended and whose pin was
// granted, if the READs ended within the pin.
func (c *pinner) pinnedReadEnded(l *load) {
	if limit := l.pinSent.Add(c.rd.cfg.TransferTimeout); l.readsEnded.After(limit) && !c.rd.rules.noPinWindow {
		c.notHeld.Inc()
		c.rd.fail(l, fmt.Errorf("%w: request %q: its READs from prefill engine %q ended %v after the pin was asked, past the %v it covers", ErrNotHeld, l.id, l.p.RemoteEngineID, l.readsEnded.Sub(l.pinSent), c.rd.cfg.TransferTimeout))
		return
	}
	c.rd.finish(l)
}
