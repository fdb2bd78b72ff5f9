package pullconn

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
)

// holder is one prefill rank's protocol, as a pure state machine in the
// manner of etcd raft's Node: events come in (a request finished, a
// completion or heartbeat from NIXL, a hold query or pin from the side
// channel, a tick, Abort, DropHolds, Close), each with the clock readings
// it needs (the rank's wall clock, RankConfig.Clock, for leases; its
// monotonic clock for pins), and actions go out through holdEdges (the
// engine's advert for a new hold; holds that ended, whose blocks go back).
// It has no goroutine, lock, agent or clock of its own: the Producer is its
// shell (its lock, the poller, the gathers into staging slots, counters
// and logs), and the simulation (sim_test.go) drives the same code with
// simulated clocks and messages.
type holder struct {
	h    *holds
	rank int
	// lease is RankConfig.Lease, extension RankConfig.HeartbeatExtension.
	lease, extension time.Duration
	// vllm: vLLM's protocol (Params on the side channel's clock, no keys,
	// nonce or incarnation: nobody pins).
	vllm   bool
	closed bool
	out    holdEdges
	// legacyQueries (tests only) restores the hold queries of b6a750d, to
	// show that the simulation finds their holes: they bind nothing and
	// extend, and answer, a hold for any decode engine.
	legacyQueries bool
}

// holdEdges are the holder's actions on the world around it.
type holdEdges interface {
	// advert returns the engine's advert of request id for this rank,
	// which holds it until own by its clock now (pullEngine.advert).
	advert(id string, rank int, now, own time.Time) advert
	// released hands back ids, whose holds ended by how: their blocks,
	// and staging slots, are the engine's again, and their adverts go.
	released(ids []string, how holdEnd)
}

// holdEnd is how holds ended.
type holdEnd uint8

const (
	endCompletion holdEnd = iota + 1 // decode's completions
	endExpiry                        // the lease ran out (and no pin kept it)
	endDrop                          // DropHolds
	endClose                         // Close
)

// held reports whether the rank holds request id.
func (c *holder) held(id string) bool { return c.h.reqs[id] != nil }

// finish holds request id's blocks (ids, all groups' together) from now
// (the rank's clock; mono its monotonic one) and returns base completed
// into the request's Params: the advertised deadline and nonce, which the
// first rank to finish the request fixed (a rank whose own lease would end
// earlier, a shorter RankConfig.Lease, holds until the advertised one, so
// each rank's hold covers it), and the hold's key from them. An id held
// already is refused and changes nothing.
func (c *holder) finish(id string, ids []int, now, mono time.Time, base Params) (Params, error) {
	if c.closed {
		return Params{}, errClosed
	}
	if err := c.h.finish(id, ids, now); err != nil {
		return Params{}, err
	}
	c.h.reqs[id].made = mono
	deadline, _ := c.h.leases.Deadline(id)
	adv := c.out.advert(id, c.rank, now, deadline)
	if adv.deadline.After(deadline) {
		c.h.leases.Extend(id, adv.deadline, 0)
	}
	p := base
	// The hold's deadline: decode never trusts the blocks past it unless
	// a hold query moved it.
	p.RemoteBlocksExpiryTime, p.RemoteHoldNonce, p.RemoteIncarnation = expirySeconds(adv.deadline), adv.nonce, adv.incarnation
	if c.vllm {
		// In vLLM's protocol the deadline is on the side channel's clock,
		// whose offset the peer measured in the handshake (vLLM's own pull
		// prefill sends none; its decode reads one this way), and gonixl's
		// keys are left out: nobody asks for a pin.
		p.RemoteBlocksExpiryTime, p.RemoteStagingSlot, p.RemoteHoldNonce, p.RemoteIncarnation = adv.mono, nil, 0, 0
	}
	c.h.setKey(id, p.holdKey())
	return p, nil
}

// abort is Producer.Abort: id's hold is no longer extended. It reports
// whether it was held and not aborted yet.
func (c *holder) abort(id string) bool { return c.h.abort(id) }

// drop is Producer.DropHolds at mono (the rank's monotonic clock). In
// vLLM's protocol it aborts every hold (aborted counts those it did) and
// keeps them all.
func (c *holder) drop(mono time.Time, unclaimedFor time.Duration, why string) (dropped, kept, aborted int) {
	if c.vllm {
		for id := range c.h.reqs {
			if c.h.abort(id) {
				aborted++
			}
		}
		return 0, c.h.len(), aborted
	}
	ids, kept := c.h.drop(mono, unclaimedFor, why)
	c.out.released(ids, endDrop)
	return len(ids), kept, 0
}

// tick releases the holds whose leases ran out by now (the rank's clock)
// and whose pins ended by mono (its monotonic clock), and returns them.
func (c *holder) tick(now, mono time.Time) []string {
	ids := c.h.expire(now, mono)
	if len(ids) > 0 {
		c.out.released(ids, endExpiry)
	}
	return ids
}

// completion takes a NIXL notification from agent sender: "<id>:<n>" from
// a vLLM decode, "<id>:<n>#<hold key>" from gonixl's, which names the
// hold it read. A malformed one is completionInvalid with its error.
func (c *holder) completion(sender string, msg []byte) (notif.Completion, completionOutcome, error) {
	n, err := notif.DecodeSeqCompletion(msg)
	if err != nil {
		return n, completionInvalid, err
	}
	out, err := c.h.complete(n, sender)
	if out == completionDone {
		c.out.released([]string{n.ID}, endCompletion)
	}
	return n, out, err
}

// heartbeat takes a NIXL heartbeat at now (the rank's clock): it extends
// the holds it names.
func (c *holder) heartbeat(msg []byte, now time.Time) error {
	ids, err := notif.DecodeHeartbeat(msg)
	if err != nil {
		return err
	}
	c.h.heartbeat(ids, now, c.extension)
	return nil
}

// extend answers this rank's part of a hold query from decode engine
// reader (its agent agent) at now (the rank's clock): it binds each hold
// of ids to the engine unless it is bound to another, extends those bound
// to it and not aborted, as a heartbeat does, and returns their deadlines
// (zero for the others).
func (c *holder) extend(reader, agent string, ids []string, now time.Time) []time.Time {
	out := make([]time.Time, len(ids))
	if c.closed {
		return out
	}
	if c.legacyQueries {
		c.h.heartbeat(ids, now, c.extension)
		for i, id := range ids {
			if r, ok := c.h.reqs[id]; ok && !r.aborted {
				out[i], _ = c.h.leases.Deadline(id)
			}
		}
		return out
	}
	for _, id := range ids {
		c.h.bind(id, reader, agent)
	}
	c.h.heartbeatFor(ids, reader, now, c.extension)
	for i, id := range ids {
		if r, ok := c.h.reqs[id]; ok && !r.aborted && r.reader == reader {
			out[i], _ = c.h.leases.Deadline(id)
		}
	}
	return out
}

// pin answers one hold of a pin from decode engine reader (its agent
// agent) at mono, the rank's monotonic clock, which no step of the wall
// clock moves (see holds.pin): "" when the rank pinned exactly that hold
// until mono + ref.PinMicros, at most maxPin, else why not; refused says
// whether the answer is a "not held" to count (a closed rank's is not).
func (c *holder) pin(reader, agent string, ref handshake.HoldRef, mono time.Time) (verdict string, refused bool) {
	d := time.Duration(ref.PinMicros) * time.Microsecond
	if limit := c.maxPin(); d > limit {
		return fmt.Sprintf("a pin of %v is longer than the %v this rank grants", d, limit), true
	}
	if c.closed {
		return "the rank is closed", false
	}
	v := c.h.pin(ref.ID, ref.Key, reader, agent, mono.Add(d))
	return v, v != ""
}

// maxPin bounds how long a reader may keep a hold past its lease: twice
// the lease, and at least minMaxPin, which covers a decode's default
// TransferTimeout and ExpiryMargin.
func (c *holder) maxPin() time.Duration { return max(2*c.lease, minMaxPin) }

// minMaxPin is the least maxPin grants.
const minMaxPin = 2 * time.Minute

// releaseAll releases every hold (Close, or a crash in the simulation) and
// returns them.
func (c *holder) releaseAll() []string {
	ids := c.h.releaseAll()
	c.out.released(ids, endClose)
	return ids
}

// holdRank is a prefill rank as the engine's side channel sees it: a
// Producer, or a simulated rank.
type holdRank interface {
	extendHolds(reader, agent string, ids []string) []time.Time
	pinHold(reader, agent string, ref handshake.HoldRef) string
}

// extendRanks answers a decode engine's hold query on an engine whose
// ranks are ranks (nil unless every rank is there): it extends, on every
// rank, the holds of ids (as a heartbeat does) and returns for each the
// earliest deadline over the ranks, in Unix nanoseconds, or 0 if some rank
// does not hold it.
func extendRanks[R holdRank](ranks []R, reader, agent string, ids []string) []int64 {
	out := make([]int64, len(ids))
	if ranks == nil {
		return out // a rank missing cannot vouch for its part of the blocks
	}
	for i, p := range ranks {
		ds := p.extendHolds(reader, agent, ids)
		for j, d := range ds {
			switch {
			case d.IsZero():
				out[j] = -1
			case out[j] == -1:
			case i == 0 || d.UnixNano() < out[j]:
				out[j] = d.UnixNano()
			}
		}
	}
	for j := range out {
		out[j] = max(out[j], 0)
	}
	return out
}

// confirmRanks answers a decode rank's pins on engine id, whose ranks are
// ranks (nil unless every rank is there): for each hold, "" when every
// rank it names holds exactly that hold for engine reader and pinned it,
// else the first rank's reason (a rank that pinned keeps its pin whatever
// the others answered: decode is reading).
func confirmRanks[R holdRank](id string, ranks []R, reader, agent string, refs []handshake.HoldRef) []string {
	out := make([]string, len(refs))
	for i, ref := range refs {
		if ranks == nil {
			out[i] = fmt.Sprintf("prefill engine %q does not have all its ranks", id)
			continue
		}
		for _, rk := range ref.Ranks {
			if v := ranks[rk].pinHold(reader, agent, ref); v != "" && out[i] == "" {
				out[i] = fmt.Sprintf("prefill engine %q rank %d: %s", id, rk, v)
			}
		}
	}
	return out
}
