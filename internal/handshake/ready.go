package handshake

import (
	"context"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/internal/notif"
)

// ReadyQuery asks a pull prefill engine how far its ranks have gathered one
// request into their staging slots (Hello.Ready). Prefill returns a
// request's Params as soon as its gather starts, and gathers it chunk by
// chunk, region-major, in the background; decode READs each chunk of a
// slot once the query says its regions are there. The server answers as
// soon as some rank's state differs from Known, or with the state it has
// once WaitMicros pass: a long poll, so decode learns of each chunk within
// a round trip of its gather.
type ReadyQuery struct {
	// ID and Key name the hold, as in HoldRef: another hold of the id
	// (another slot, blocks or deadline) is answered ReadyNotHeld.
	ID  string `msgpack:"id"`
	Key uint64 `msgpack:"key"`
	// Ranks are the prefill TP ranks asked about; Known, one entry per
	// rank in the same order, is what the asker knows of each (an answer
	// it had, 0 at first).
	Ranks RankNumbers `msgpack:"ranks"`
	Known ReadyStates `msgpack:"known"`
	// WaitMicros is how long the server may wait for a change before it
	// answers, at most MaxReadyWait; 0 answers at once.
	WaitMicros int64 `msgpack:"wait_us"`
}

// A rank's readiness in Reply.Ready: how many regions of its image are
// gathered (0 to all of them, in order), or one of these.
const (
	// ReadyFailed: the rank's gather failed; the slot never holds the
	// request (its blocks stay held until the hold ends as usual).
	ReadyFailed = -1
	// ReadyNotHeld: the rank holds no such hold, or gathers it into no
	// slot (it ended, or the query names another hold).
	ReadyNotHeld = -2
)

// MaxReadyWait bounds ReadyQuery.WaitMicros: a server thread waits at most
// this long, well within the side channel's timeouts.
const MaxReadyWait = time.Second

// maxRegionsState bounds a readiness count, far above any layout's
// regions.
const maxRegionsState = 1 << 20

// ReadyStates is a readiness query's known states, decoded within
// MaxConfirmRanks entries for the reason RankNumbers is.
type ReadyStates []int

// DecodeMsgpack decodes the list within the bound above.
func (rs *ReadyStates) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("readiness states: %w", err)
	}
	if n > MaxConfirmRanks {
		return fmt.Errorf("readiness query has %d states, limit %d", n, MaxConfirmRanks)
	}
	if n <= 0 {
		*rs = nil
		return nil
	}
	out := make(ReadyStates, 0, min(n, 16))
	for i := range n {
		v, err := dec.DecodeInt()
		if err != nil {
			return fmt.Errorf("readiness states[%d]: %w", i, err)
		}
		out = append(out, v)
	}
	*rs = out
	return nil
}

// checkReady checks a readiness query against the engine's shape.
func (s *Server) checkReady(q *ReadyQuery) error {
	switch {
	case q.ID == "" || len(q.ID) > notif.MaxIDLen:
		return fmt.Errorf("id is %d bytes, want 1..%d", len(q.ID), notif.MaxIDLen)
	case len(q.Ranks) == 0 || len(q.Ranks) > s.engine.TPSize:
		return fmt.Errorf("names %d prefill ranks, engine has %d", len(q.Ranks), s.engine.TPSize)
	case len(q.Known) != len(q.Ranks):
		return fmt.Errorf("has %d known states for %d ranks", len(q.Known), len(q.Ranks))
	case q.WaitMicros < 0 || q.WaitMicros > MaxReadyWait.Microseconds():
		return fmt.Errorf("wait of %d us, want 0..%d", q.WaitMicros, MaxReadyWait.Microseconds())
	}
	seen := make(map[int]bool, len(q.Ranks))
	for i, rk := range q.Ranks {
		if rk < 0 || rk >= s.engine.TPSize || seen[rk] {
			return fmt.Errorf("prefill rank %d is out of range 0..%d or named twice", rk, s.engine.TPSize-1)
		}
		seen[rk] = true
		if k := q.Known[i]; k < ReadyNotHeld || k > maxRegionsState {
			return fmt.Errorf("known state %d of rank %d outside [%d, %d]", k, rk, ReadyNotHeld, maxRegionsState)
		}
	}
	return nil
}

// ready answers a readiness query.
func (s *Server) ready(h Hello, r Reply) Reply {
	switch {
	case s.onReady == nil:
		r.Error = fmt.Sprintf("engine %q gathers no requests for peers (not a pull prefill engine with staging)", s.engine.EngineID)
		return r
	case h.Agent == "" || len(h.Agent) > notif.MaxIDLen:
		r.Error = fmt.Sprintf("readiness query names an agent of %d bytes, want 1..%d", len(h.Agent), notif.MaxIDLen)
		return r
	}
	if err := s.checkReady(h.Ready); err != nil {
		r.Error = fmt.Sprintf("readiness query: %v", err)
		return r
	}
	r.Ready = s.onReady(h.EngineID, h.Agent, *h.Ready)
	return r
}

// Ready asks engine engineID at addr how far its ranks q.Ranks have
// gathered the hold q names, waiting on the server for at most
// q.WaitMicros for a state other than q.Known; it returns one state per
// rank (a region count, ReadyFailed or ReadyNotHeld). Safe to repeat.
func (c *Client) Ready(ctx context.Context, engineID, addr, agent string, q ReadyQuery) ([]int, error) {
	h := c.hello
	h.Ready, h.Agent = &q, agent
	r, _, _, err := c.ask(ctx, "readiness query", engineID, addr, h)
	switch {
	case err != nil:
		return nil, err
	case len(r.Ready) != len(q.Ranks):
		return nil, fmt.Errorf("%w: readiness query to engine %q at %s: %d answers for %d ranks", ErrFailed, engineID, addr, len(r.Ready), len(q.Ranks))
	}
	out := make([]int, len(r.Ready))
	for i, v := range r.Ready {
		if v < ReadyNotHeld || v > maxRegionsState {
			return nil, fmt.Errorf("%w: readiness query to engine %q at %s: state %d of rank %d outside [%d, %d]", ErrFailed, engineID, addr, v, q.Ranks[i], ReadyNotHeld, maxRegionsState)
		}
		out[i] = int(v)
	}
	return out, nil
}
