package pullconn

import (
	"fmt"
	"strings"
	"time"

	"github.com/gonixl/gonixl/internal/handshake"
)

// The deterministic simulation's world: true time, the event queue, the
// engines' clocks (wall and monotonic), the network and the trace. Everything that varies comes
// from the seed's one PCG stream (sim.rng): there are no goroutines, no
// real time, no map iteration where order matters, so a seed replays
// step for step. What runs on it: the prefill side and the invariants in
// sim_test.go, the production decode reader in its shell in
// simdecode_test.go.

// simEpoch is true time 0. It is near today's Unix time so that
// RemoteBlocksExpiryTime, a float of seconds, has the precision it has in
// production (about a tenth of a microsecond).
var simEpoch = time.Unix(1_750_000_000, 0)

// simClock is one engine's (or prefill rank's) wall clock: true time plus
// an offset that clock steps move either way. It has no monotonic reading,
// the pessimistic case: a step moves every deadline the clock measures.
type simClock struct{ off time.Duration }

func (s *sim) now(c *simClock) time.Time { return simEpoch.Add(s.t + c.off) }

// simMono is one process's monotonic clock (time.Now's monotonic reading,
// which pins are timed by on both sides): it never steps, but it starts
// anywhere and runs at its own rate, within the +-500 ppm that NTP may
// slew a clock by. A restarted process has a new one.
type simMono struct {
	off time.Duration
	ppm float64
}

func (s *sim) mono(m *simMono) time.Time {
	return simEpoch.Add(m.off + time.Duration(float64(s.t)*(1+m.ppm*1e-6)))
}

// newMono draws a monotonic clock: an origin unrelated to true time and a
// rate within simMonoPPM.
func (s *sim) newMono() simMono {
	return simMono{off: s.between(-time.Hour, time.Hour), ppm: (2*s.rng.Float64() - 1) * simMonoPPM}
}

// simKind is what an event does when its time comes.
type simKind uint8

const (
	evGen     simKind = iota + 1 // the prefill engine starts a request
	evFinish                     // RequestFinished on one prefill rank
	evParams                     // the proxy hands Params to a decode engine
	evMsg                        // a network message arrives
	evRead                       // one READ completes (or fails)
	evTimeout                    // a side-channel call's deadline passes
	evDTick                      // a decode rank's reader loop runs
	evPTick                      // a prefill rank's poller runs (lease expiry)
	evChaos                      // a fault is injected
	evRestart                    // a crashed prefill rank comes back
	evDrop                       // Engine.dropAdverts, run after another rank may have advertised
)

// simEvent is one entry of the queue. Ties in time are broken by seq, the
// order in which events were scheduled, so the queue is deterministic.
type simEvent struct {
	at   time.Duration
	seq  uint64
	kind simKind
	a, b int
	x    uint64
	msg  *simMsg
	xfer *simXfer
	req  *simReq
	del  *simDelivery
}

// simQueue is a binary min-heap of events by (at, seq).
type simQueue []simEvent

func (q simQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *simQueue) push(e simEvent) {
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

func (q *simQueue) pop() simEvent {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = simEvent{}
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
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

// schedule queues e to happen after d of true time.
func (s *sim) schedule(d time.Duration, e simEvent) {
	s.seq++
	e.at, e.seq = s.t+max(d, 0), s.seq
	s.q.push(e)
}

// between returns a uniform duration in [lo, hi).
func (s *sim) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

func (s *sim) chance(p float64) bool { return s.rng.Float64() < p }

// simMsgKind is a network message's kind. Side-channel calls (hello, hold
// query, pin) and their answers travel over TCP in the real code;
// here every message may be delayed, reordered, duplicated (a retried
// call) or lost (a call that times out), as NIXL notifications may.
type simMsgKind uint8

const (
	mHello simMsgKind = iota + 1
	mHelloReply
	mQuery
	mQueryReply
	mPin      // a confirmation call asking to pin a hold (handshake.HoldRef with PinMicros)
	mPinReply // its verdict
	// mCompletion is the NIXL notification "<id>:<n>" (legacy rules: it
	// rides on the READ) or "<id>:<n>#<hold key>" (pin rules: sent once
	// done).
	mCompletion
	mHeartbeat // NIXL notification "HB:<id>,..."
)

var simMsgNames = [...]string{mHello: "hello", mHelloReply: "hello-reply", mQuery: "hold-query", mQueryReply: "hold-answer",
	mPin: "pin", mPinReply: "pin-verdict", mCompletion: "completion", mHeartbeat: "heartbeat"}

// simMsg is one message. It is never changed once sent, so a duplicate
// may share it.
type simMsg struct {
	kind  simMsgKind
	call  uint64 // the side-channel call it belongs to
	eng   int    // decode engine (sender of a request, addressee of a reply)
	rank  int    // decode rank
	prank int    // prefill rank, for NIXL notifications
	agent string // the decode rank's agent
	id    string
	n     int
	seq   uint64 // a completion's "#<seq>": the hold key it names, 0 none
	ids   []string
	refs  []handshake.HoldRef // a pin's holds
	sent  time.Time           // decode clock when the call was made
	now   int64               // prefill clock in a reply, Unix ns
	holds []int64
	whys  []string // a pin verdict's, by hold
	retry bool     // hello reply: a rank is restarting, ask again
	inc   []int    // hello reply: the ranks' incarnations (their agent metadata)
	// pinned and until are the model's notes on a pin verdict, by hold and
	// rank named: the hold that rank had as it answered "" (nil: none, or
	// it refused) and the end of the pin it granted, on its monotonic
	// clock (not part of the real reply).
	pinned [][]*simHold
	until  [][]time.Time
}

// send puts m on the network: lost, or delivered after a random delay,
// sometimes twice. Long delays, beyond a lease, happen too.
func (s *sim) send(m *simMsg) { s.sendAfter(m, 0) }

// sendAfter is send with extra delay on top of the network's.
func (s *sim) sendAfter(m *simMsg, extra time.Duration) {
	if s.chance(s.net.loss) {
		s.trace("lost", simMsgNames[m.kind], m.eng, m.rank, m.id)
		return
	}
	s.schedule(extra+s.netDelay(), simEvent{kind: evMsg, msg: m})
	if s.chance(s.net.dup) {
		s.schedule(extra+s.netDelay(), simEvent{kind: evMsg, msg: m})
	}
}

func (s *sim) netDelay() time.Duration {
	u := s.rng.Float64()
	switch {
	case u < s.net.slow:
		return s.between(0, 3*simLease)
	case u < 0.06: // the tail, within a side-channel call's timeout
		return s.between(30*time.Millisecond, 450*time.Millisecond)
	case u < 0.25:
		return s.between(time.Millisecond, 30*time.Millisecond)
	default:
		return s.between(20*time.Microsecond, time.Millisecond)
	}
}

// simNet is the network's fault rates.
type simNet struct{ loss, dup, slow float64 }

// simTraceLen is how many events a violation report shows, and
// simWatchLen how many of the history of the request it names.
const (
	simTraceLen = 32
	simWatchLen = 48
)

// simTraceEntry is one traced event; it is formatted only for a report,
// so tracing costs no allocation.
type simTraceEntry struct {
	step int
	t    time.Duration
	what string
	note string
	a, b int
	id   string
}

// trace records an event in the ring and in the run's hash.
func (s *sim) trace(what, note string, a, b int, id string) {
	e := &s.ring[s.ringN%simTraceLen]
	s.ringN++
	*e = simTraceEntry{step: s.step, t: s.t, what: what, note: note, a: a, b: b, id: id}
	h := s.hash
	for _, v := range [...]uint64{uint64(s.t), uint64(a), uint64(b), uint64(len(what)), uint64(len(note)), uint64(len(id))} {
		h ^= v
		h *= 1099511628211
	}
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	s.hash = h
	if s.watch != "" && (id == s.watch || what == "clock-step" || what == "crash" || what == "restart") {
		if len(s.watched) == simWatchLen {
			s.watched = s.watched[1:]
		}
		s.watched = append(s.watched, *e)
	}
}

// lastTrace returns the ring, oldest first.
func (s *sim) lastTrace() string {
	n := min(s.ringN, simTraceLen)
	es := make([]simTraceEntry, 0, n)
	for i := s.ringN - n; i < s.ringN; i++ {
		es = append(es, s.ring[i%simTraceLen])
	}
	return simFormat(es)
}

func simFormat(es []simTraceEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "  step %7d  t=%-14v %-14s %-16s a=%d b=%d %s\n", e.step, e.t, e.what, e.note, e.a, e.b, e.id)
	}
	return b.String()
}
