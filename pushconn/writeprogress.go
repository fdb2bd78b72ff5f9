package pushconn

import (
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/pushconn/internal/match"
)

// Progressive push: the engine reports, while it still computes a request,
// which of its blocks are final in every layer, and which in its first
// layers only (Producer.Progress; writelayers.go), and the writer core
// WRITEs what became final into every registration already waiting for
// the request, with no completion; the rest goes at
// RequestFinished, in the WRITE that carries the completion as before. So
// decode and the wire are unchanged (a vLLM decode pairs), and the promise
// holds the same way:
//
//   - one progressive WRITE per registration at a time; the final WRITE,
//     the only one with a completion, is posted only once it ended, so no
//     completion reaches decode before every earlier byte landed;
//   - a registration that leaves (cancelled, expired) while a progressive
//     WRITE of it is in flight is answered (PUSH_CANCEL_ACK, PUSH_FAIL) only
//     once that WRITE ended, completed, failed or released;
//   - the hold's blocks are freed only when no WRITE of them is in flight
//     (hold.writes counts the progressive ones too), aborted or not;
//   - a progressive WRITE that fails, or that cannot be mapped one to one
//     (decode's blocks of another size), only turns progress off for its
//     registration: its final WRITE then moves everything.

// progressWriter is the writer core's progressive push: its own type,
// over the core's state, so that the core stays one concern.
type progressWriter struct{ *writeCore }

// progressEvent is one Producer.Progress report: h is the request's hold
// (the same for every report of it), blocks the request's blocks so far,
// the first final of them final in every layer and the others in the
// rank's first layers (0: none), tokens the prompt's length.
type progressEvent struct {
	h      *hold
	blocks []int
	final  int
	layers int
	tokens int
}

// progress takes the engine's progress reports and writes what became
// final into the registrations waiting for their requests.
func (c progressWriter) progress(evs []progressEvent) {
	for _, ev := range evs {
		h := c.holds[ev.h.id]
		if h == nil {
			h = ev.h
			h.progressive = true
			c.reports++
			h.reported = c.reports
			c.holds[h.id] = h
			c.progressing[h.id] = h
		}
		if h != ev.h || !h.progressive || h.released {
			continue // finished, freed or another request of the id: nothing to add
		}
		h.blocks, h.final, h.layers, h.tokens = ev.blocks, ev.final, ev.layers, ev.tokens
		if c.edge.aborted(h.id) {
			continue
		}
		for _, pr := range c.matcher.Peek(match.Key{RequestID: h.id, TransferID: h.transferID}) {
			c.writePart(pr, h)
		}
	}
}

// progressed hands a registration just admitted (still pending) the
// blocks already final of a request that reports progress and that it
// would pair with. When several would (requests of one base id, which the
// matcher pairs by: a retry while the first attempt still computes), the
// one that reported first: a rule, so that a run is the same every time
// (map order picked one before, which the simulation's replay found).
func (c progressWriter) progressed(pr *pendingReg) {
	var first *hold
	for _, h := range c.progressing {
		if !h.progressive || h.final == 0 && h.layers == 0 || c.edge.aborted(h.id) || first != nil && first.reported < h.reported {
			continue
		}
		for _, q := range c.matcher.Peek(match.Key{RequestID: h.id, TransferID: h.transferID}) {
			if q == pr {
				first = h
				break
			}
		}
	}
	if first != nil {
		c.writePart(pr, first)
	}
}

// writePart posts registration pr's progressive WRITE of h's final blocks
// not yet written, unless one is in flight (it posts the next when it
// ends) or progress is off for pr.
func (c progressWriter) writePart(pr *pendingReg, h *hold) {
	if pr.partial != nil || pr.skip || !h.progressive {
		return
	}
	if pr.progress != h {
		pr.progress, pr.partInto = h, partUndecided
		pr.setMark(layerMark{})
	}
	if pr.peer.payload == nil || !pr.sameInstance() {
		return // its final WRITE handshakes or drops it, as without progress
	}
	h.writes++
	r := c.edge.postPart(pr, h)
	switch r.what {
	case postInFlight, postCancelling:
		c.push.progressWrites.Inc()
		pr.partial = r.wr
		pr.peer.refs++ // not idle (evicted) while it moves, even if the registration ends meanwhile
		c.inflight = append(c.inflight, r.wr)
	case postCompleted:
		c.push.progressWrites.Inc()
		pr.peer.refs++
		c.edge.completed(r.wr)
		c.partEnded(r.wr, nil)
	case postNotify: // nothing new is final
		h.writes--
	default:
		h.writes--
		c.skipProgress(pr, h, r.err)
	}
}

// skipProgress turns progress off for pr: its final WRITE moves all.
func (c progressWriter) skipProgress(pr *pendingReg, h *hold, err error) {
	pr.skip = true
	pr.setMark(layerMark{})
	c.push.progressSkipped.Inc()
	c.log.Debug("pushconn: progressive WRITE off for a registration; written whole at finish",
		zap.String("request", h.id), zap.String("decode_request", pr.reg.RequestID), zap.Error(err))
}

// partEnded settles a progressive WRITE that ended (err nil: completed):
// the cancels and PUSH_FAILs held back for it go out, the final WRITE
// waiting for it starts, or the next progressive one.
func (c progressWriter) partEnded(wr *write, err error) {
	pr, h := wr.reg, wr.hold
	pr.partial = nil
	pr.peer.refs--
	h.writes--
	switch {
	case err != nil:
		c.skipProgress(pr, h, err)
	case pr.progress == h:
		pr.setMark(layerMark{wr.to, wr.tailTo, wr.tailLayers})
	}
	// Decode cancelled the registration while this moved: once the ack
	// is out it reuses the blocks, so nothing more of it is written.
	cancelled := len(wr.acks) > 0
	c.out.ackEnded(wr)
	if wr.after != nil {
		wr.after()
	}
	switch {
	case pr.finalWaits:
		pr.finalWaits = false
		fh := pr.finalHold
		pr.finalHold = nil
		if cancelled {
			c.endWrite(pr, fh)
			break
		}
		c.startWrite(pr, fh)
	case wr.after == nil && h.progressive && pr.behind(h) && !c.edge.aborted(h.id):
		for _, q := range c.matcher.Peek(match.Key{RequestID: h.id, TransferID: h.transferID}) {
			if q == pr {
				c.writePart(pr, h)
			}
		}
	}
	c.maybeRelease(h)
}

// adopt merges finished request h into the hold of its progress reports,
// if it had any, and returns the hold to go on with.
func (c progressWriter) adopt(h *hold) *hold {
	ph := c.holds[h.id]
	if ph == nil || !ph.progressive || ph.released {
		return h
	}
	ph.progressive = false
	delete(c.progressing, ph.id)
	ph.blocks, ph.groups, ph.tokens, ph.final, ph.layers = h.blocks, h.groups, h.tokens, len(h.blocks), 0
	ph.finished, ph.transferID = h.finished, h.transferID
	return ph
}
