package pushconn

// The deterministic simulation's plumbing: simulated time, the event queue,
// the network between decode and prefill ranks (loss, delay, reordering,
// late duplicates), the trace of the last events and its replay hash. The
// world itself (engines, the real writer and decode cores, the modeled
// agents and engines, the invariants) is in sim_test.go.
//
// Nothing here runs a goroutine, reads the wall clock or sleeps: one
// math/rand/v2 PCG seeded with the run's seed draws every choice, and events
// with the same time run in the order they were scheduled, so a seed replays
// the same run event for event (TestSimReplay checks that).

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gonixl/gonixl/pushconn/internal/match"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// Simulated time is in nanoseconds since the start of a run ("real" time,
// which no engine sees: each engine reads it through its own clock, which
// may step either way; see simWorld.decodeNow and prefillNow).
const (
	simUs = int64(time.Microsecond)
	simMs = int64(time.Millisecond)
	simS  = int64(time.Second)
)

// simEpoch is where the engines' clocks start (any instant far from zero,
// so that backward steps never reach time.Time's zero value).
var simEpoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// simRand wraps the run's one PCG with the draws the model uses.
type simRand struct{ r *rand.Rand }

func newSimRand(seed uint64) simRand {
	return simRand{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// chance reports true with probability p.
func (s simRand) chance(p float64) bool { return p > 0 && s.r.Float64() < p }

// between draws uniformly from [lo, hi].
func (s simRand) between(lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	return lo + s.r.Int64N(hi-lo+1)
}

func (s simRand) intn(n int) int { return s.r.IntN(n) }

// ---- messages and the network -------------------------------------------

// simMsgKind is the kind of a notification between the engines.
type simMsgKind uint8

const (
	simReg        simMsgKind = iota + 1 // PUSH_REG, decode -> prefill
	simCancel                           // PUSH_CANCEL, decode -> prefill
	simCompletion                       // "<id>:<n>[#<seq>]", prefill -> decode (rides the WRITE)
	simCancelAck                        // PUSH_CANCEL_ACK, prefill -> decode
	simFail                             // PUSH_FAIL, prefill -> decode
	simPart                             // PUSH_STAGED_PART, prefill -> decode (rides a staged part's WRITE)
	simMsgKinds
)

var simMsgNames = [...]string{"", "PUSH_REG", "PUSH_CANCEL", "completion", "PUSH_CANCEL_ACK", "PUSH_FAIL", "PUSH_STAGED_PART"}

func (k simMsgKind) String() string { return simMsgNames[k] }

// Trace texts made once, so that recording an entry allocates nothing.
var (
	simDeliverNames, simCopyNames [simMsgKinds]string
	simFailNotes                  = map[pushwire.FailKind]string{}
)

func init() {
	for k := simReg; k < simMsgKinds; k++ {
		simDeliverNames[k] = "deliver " + k.String()
		simCopyNames[k] = "deliver late copy of " + k.String()
	}
	for _, k := range []pushwire.FailKind{pushwire.FailHandshake, pushwire.FailLayout, pushwire.FailPost, pushwire.FailTransfer,
		pushwire.FailExpired, pushwire.FailClosed, pushwire.FailOverloaded, pushwire.FailAborted} {
		simFailNotes[k] = "prefill sends PUSH_FAIL (" + string(k) + ")"
	}
}

// simMsg is one notification in the network: its bytes (encoded and decoded
// with the real codecs: pushwire, notif) and, for the trace and the
// invariants only, what it is about. Nothing of the model's bookkeeping
// reaches the protocol code: prefill and decode act on the bytes.
type simMsg struct {
	kind     simMsgKind
	toDecode bool
	from, to int // rank indexes (decode ranks when toDecode is false for from, etc.)
	b        []byte
	// Bookkeeping: the id and seq for the trace (a WRITE finds the decode
	// request it writes into by them: simDecode.byReg).
	id    string
	seq   uint64
	dstIn int  // the destination prefill rank's incarnation when sent
	copy  bool // a late duplicate made by the network
}

// simNetConfig is the network's fault model. Probabilities are per message
// and per kind, so an attack can turn on exactly one fault of one kind.
type simNetConfig struct {
	loss [simMsgKinds]float64 // the message is never delivered
	dup  [simMsgKinds]float64 // a second copy is delivered late
	// Delays: every message takes base; with probability long it takes
	// longMax at most instead (so messages overtake each other); a
	// duplicate comes lateMin..lateMax after the original.
	baseMin, baseMax int64
	long             float64
	longMax          int64
	lateMin, lateMax int64
}

func (c *simNetConfig) lossAll(p float64) {
	for k := range c.loss {
		c.loss[k] = p
	}
}

func (c *simNetConfig) dupAll(p float64) {
	for k := range c.dup {
		c.dup[k] = p
	}
}

// send puts m into the network: lost, delivered after a delay, and perhaps
// delivered again later.
func (w *simWorld) send(m *simMsg) {
	nc := &w.cfg.net
	w.stats.sent[m.kind]++
	if w.rng.chance(nc.loss[m.kind]) {
		w.stats.lost[m.kind]++
		w.note("net: lost", m.to, m.id, m.seq, int64(m.kind))
		return
	}
	d := w.rng.between(nc.baseMin, nc.baseMax)
	if w.rng.chance(nc.long) {
		d = w.rng.between(nc.baseMax, nc.longMax)
	}
	w.schedule(&simEvent{at: w.now + d, kind: evDeliver, msg: m})
	if w.rng.chance(nc.dup[m.kind]) {
		c := *m
		c.copy = true
		w.stats.dups[m.kind]++
		w.schedule(&simEvent{at: w.now + d + w.rng.between(nc.lateMin, nc.lateMax), kind: evDeliver, msg: &c})
	}
}

// ---- events ---------------------------------------------------------------

type simEvKind uint8

const (
	evDeliver         simEvKind = iota + 1 // a message reaches its destination
	evDecodeTick                           // a decode rank's poller tick (and the engine's Drain)
	evPrefillTick                          // a prefill rank's writer tick (and the engine's DrainFreed)
	evArrival                              // the proxy sends a request (or a retry) to both engines
	evDecodeRegister                       // decode allocated the request's blocks: Register on every rank
	evPrefillFinish                        // prefill finished computing: RequestFinished on every rank
	evDecodeAbort                          // decode's engine drops the request: Abort on every rank
	evPrefillAbort                         // prefill's engine drops the request: Abort on every rank
	evDecodeShake                          // a decode rank's handshake with prefill ends
	evPrefillShake                         // a prefill rank's handshake with decode ends
	evLand                                 // some bytes of a WRITE land in decode's memory
	evAgentEnd                             // a WRITE ends in the agent: completed (notification sent) or failed
	evClockStep                            // an engine's clock steps
	evCrash                                // a prefill rank's process dies
	evRestart                              // it starts again, empty
	evPrefillProgress                      // prefill computed a chunk: Progress on every rank
)

// simEvent is one scheduled event; n orders events of the same time by when
// they were scheduled, which makes the run deterministic.
type simEvent struct {
	at   int64
	n    uint64
	kind simEvKind
	rank int
	inc  int
	i    int
	ok   bool
	key  string // a prefill handshake's decode engine
	msg  *simMsg
	att  *simAttempt
	wr   *simWrite
}

// simQueue is a binary min-heap of events by (at, n).
type simQueue []*simEvent

func (q simQueue) less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].n < q[j].n
}

func (q *simQueue) push(e *simEvent) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *simQueue) pop() *simEvent {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = nil
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if r < len(h) && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

func (w *simWorld) schedule(e *simEvent) {
	w.seqN++
	e.n = w.seqN
	w.queue.push(e)
}

// ---- trace and replay hash ------------------------------------------------

// simTraceLen is how many of the last trace entries a violation report shows.
const simTraceLen = 32

// simTraceEntry is one thing that happened: an event handled, or something
// it did (a message lost, bytes landed, a result published). what is always
// a constant string, so recording an entry allocates nothing.
type simTraceEntry struct {
	step int
	at   int64
	what string
	rank int
	id   string
	seq  uint64
	x    int64
}

// note records an entry in the trace ring and folds it into the run's hash
// (FNV-1a over every field), which two runs of one seed must agree on.
func (w *simWorld) note(what string, rank int, id string, seq uint64, x int64) {
	e := simTraceEntry{step: w.step, at: w.now, what: what, rank: rank, id: id, seq: seq, x: x}
	w.trace[w.traceN%simTraceLen] = e
	w.traceN++
	if w.watch != "" && id != "" && match.Base(id) == w.watch && len(w.watched) < 1000 {
		w.watched = append(w.watched, e)
	}
	h := w.hash
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	mix(uint64(w.now))
	mix(uint64(len(what)) | uint64(rank)<<16 | uint64(len(id))<<32)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	mix(seq)
	mix(uint64(x))
	w.hash = h
}

// traceString formats the last entries, oldest first.
func (w *simWorld) traceString() string {
	n := min(w.traceN, simTraceLen)
	out := make([]simTraceEntry, 0, n)
	for k := w.traceN - n; k < w.traceN; k++ {
		out = append(out, w.trace[k%simTraceLen])
	}
	return simFormat(out)
}

func simFormat(es []simTraceEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "  step %7d  t=%11.6fs  %-50s rank=%2d id=%-22q seq=%d x=%d\n",
			e.step, float64(e.at)/float64(simS), e.what, e.rank, e.id, e.seq, e.x)
	}
	return b.String()
}

// simHistory replays v's seed watching the request v names: every trace
// entry of its id (all suffixes), from the start of the run. The run is
// deterministic, so the replay ends in the same violation.
func simHistory(cfg simConfig, rules simRules, v *simViolation) string {
	if v.id == "" {
		return ""
	}
	w := newSimWorld(cfg, rules, v.seed)
	w.watch = match.Base(v.id)
	w.run(v.step + 1)
	return fmt.Sprintf("every event of %q and its retries (replayed):\n%s", w.watch, simFormat(w.watched))
}
