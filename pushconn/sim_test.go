package pushconn

// A deterministic simulation of the push protocol, in the style of etcd
// raft's and FoundationDB's: one seed drives everything, there is no
// goroutine, no wall clock and no sleeping, and after every step four
// invariants are checked (see simWorld.publish, land and checkLiveness):
//
//  1. no done result whose decode blocks do not all carry that request's
//     bytes (every part: with prefill TP 2 -> decode TP 1 each block holds
//     one part per prefill rank);
//  2. no WRITE lands in a decode block after decode handed it back to the
//     engine (the tracker published the request's connector.Result);
//  3. every request ends exactly once on decode (its connector.Result is published
//     once, and no later than its registration timeout plus the cancel
//     timeout, on decode's clock);
//  4. decode blocks are handed back exactly once.
//
// What is REAL code here (called exactly as the connector calls it):
//   - prefill: the writer core (writeCore, writecore.go and its files:
//     writeadmit.go, writepeers.go, notices.go, regmemory.go,
//     decoderestart.go) — one per prefill TP rank, fed the events its
//     shell (writer.go) feeds it: onRegistration, onCancel, and tick (the
//     handshakes that ended, the requests that finished or were aborted,
//     the WRITEs in flight, the deadlines); it reads the rank's clocks
//     through its edge. That is the
//     whole protocol of a prefill rank: the decode engine entry and its
//     handshake (parked registrations, acks held for it, the payload's
//     layout and incarnation checks), match.Matcher, admit, finish,
//     startWrite, pollWrites with its "cancelling" state, failWrite,
//     PUSH_FAIL, endWrite, maybeRelease, expire, cancel and its acks,
//     abort, and the memories (cancelledRegs, seenRegs, seqlessEnded,
//     lapsed);
//   - decode: the decode core (decodeCore, decodecore.go, prefillgone.go,
//     enginettl.go) with its tracker (tracker.go) — one per decode TP
//     rank, fed as the Consumer feeds it: tick (the handshakes that ended,
//     the requests registered since, expiry, the cancels the tracker
//     orders) and onCompletion, onFailure, onCancelAck; it reads the
//     rank's clocks through its edge. That is route behind a handshake,
//     handshakeDone, send (each rank marked sent before its GenNotif, the
//     request failed when a send fails), the tracker's counting, the
//     PUSH_CANCEL resends and cancel timeouts, sendCancels; the Consumer's
//     own calls around it (Register: tracker.add and the seq; Abort:
//     tracker.fail; Drain) are a few lines here, as in consumer.go;
//   - the wire: every notification is encoded and decoded with the real
//     codecs (pushwire PUSH_REG / PUSH_CANCEL / PUSH_CANCEL_ACK / PUSH_FAIL,
//     notif.EncodeSeqCompletion / DecodeSeqCompletion).
//
// What is MODELED:
//   - the writer core's edge (writeEdge, implemented by simPrefill): the
//     agent's GenNotif (it fails until the decode agent's metadata is
//     loaded, as a real agent's does), its WRITEs (post, XferStatus,
//     ReleaseXferReq; below), the handshake client (a payload with every
//     decode rank's layout, agent and incarnation, or a failure), and the
//     Producer's queues and block table around the core (RequestFinished,
//     Abort, free);
//   - the decode core's edge (decodeEdge, implemented by simDecode): the
//     agent's GenNotif to a prefill rank (it fails while the rank is down,
//     and now and then reports an error although the message went), the
//     handshake client (a payload with every prefill rank's layout and
//     agent, or a failure), and no lock (nothing runs concurrently);
//   - the NIXL agent: a WRITE's bytes land block by block while it moves;
//     it completes (the completion notification rides it), fails in flight,
//     hangs until the writer's timeout, fails to post, or completes at once;
//     a failed WRITE may keep moving bytes until the agent lets go of it;
//   - the engines: the proxy sends requests (some slow on prefill, some
//     retried with new suffixes, some reusing an earlier request's ids),
//     decode allocates blocks from a free list (so blocks are reused at
//     once) and poisons every block it gets back, prefill computes each
//     request's bytes into its blocks (a tag per block: the logical request
//     whose KV they hold) and poisons blocks it frees, and either engine
//     aborts requests;
//   - faults: the network (simnet_test.go) loses, delays, reorders and
//     duplicates every kind of notification; each engine's clock steps
//     either way; prefill ranks crash and restart empty; WRITEs fail to
//     post, fail in flight, hang, and are released late; handshakes and
//     decode's sends fail.
//
// Staging (TestSimProgressiveStaged) is in simstage_test.go, which says
// what of it is real and what modeled; of staging it leaves out grouped
// requests, pipeline stages, the planned (non one-to-one) staged WRITE of
// 2 -> 1 and 1 -> 2 (those pairings write directly there while decode
// offers its slot), prefix hits, and a staged WRITE the agent will not let
// go of when its gather fails (abandon's cancelling case).
//
// Left out (each is tested elsewhere): decode restarts and
// incarnations (decode never restarts here, so no WRITE is retried after a
// fresh handshake), the MaxPeers and MaxPendingRegistrations limits,
// prefix hits (decode always registers every block), Close, vLLM's
// protocol, and the probe of a prefill rank that a send found gone (a
// failed send here is never the agent's disconnect error, so the decode
// core's prefillgone.go runs no probe).
//
// Assumptions the model makes about its environment, which the protocol
// rests on (documented in docs/push.md and doc.go):
//   - every delay of a message, duplicates included, is far below prefill's
//     registration timeout (the memory of seen, cancelled and ended
//     registrations lasts that long);
//   - a seq-less request (vLLM's decode sends no registration_seq) never
//     reuses a decode request id: the package documentation lists, under
//     "Not guaranteed against a decode that sends no seq", the duplicated
//     plain completion and the late PUSH_CANCEL/PUSH_CANCEL_ACK of an
//     earlier registration of the same id (a late PUSH_FAIL copy does the
//     same: without a seq, isSource cannot tell whose it is);
//   - a WRITE the agent does not release at once (the writer's
//     "cancelling" state) is released within 0.9 write timeouts of its
//     failure or of the writer's timeout: past one write timeout the
//     writer reports it failed anyway (stuck_writes), for which no
//     guarantee is claimed;
//   - messages in flight to a prefill rank when it crashes die with its
//     connections; a crashed rank's WRITEs stop moving bytes at the crash;
//     decode reaches a restarted rank at once (as after a fresh
//     handshake), and a registration sent while it is down fails to send.
//
// Two rule sets: currentRules (this revision) and legacyRules (main at
// b6a750d, before 61c7e0a and c653a90), so that TestSimFindsLegacyPushHoles
// shows the simulation finds the two holes those commits closed. The old
// rules are test-only switches in the production code the simulation
// runs: writeCore.legacy.plainCompletions (a completion names no seq) and
// regMemory.noSeqless (no memory of seq-less registrations) on prefill,
// decodeCore.legacy.anySeqCompletion (a completion counts for whatever
// registration of its id the rank holds) on decode.
//
// Configurations: the short one runs with go test; GONIXL_SIM=long runs at
// least 100 seeds x 1,000,000 steps; GONIXL_SIM_SEED=<n> runs seed n only.
//
// Finding of the first long run, fixed since (b529ccf): a WRITE the agent
// had not released yet could still land after decode's cancel timeout,
// because the writer keeps it up to 2 x WriteTimeout after its post and
// decode waited CancelTimeout (then WriteTimeout + 10 s) from the request's
// end; TestSimFindingUnreleasedWriteOutlivesCancelTimeout shows it on the
// real connector with the old default.

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// simRules is the protocol revision the model runs.
type simRules struct {
	name string
	// seqCompletions: prefill's completion names its registration's seq
	// ("<id>:<n>#<seq>") and decode counts it only for that registration
	// (61c7e0a). Off: "<id>:<n>", counted for whatever registration of the
	// id decode holds, live or draining (b6a750d).
	seqCompletions bool
	// seqlessMemory: prefill remembers the seq-less registrations it ended
	// without a WRITE (cancel acknowledged, PUSH_FAIL) and drops late
	// identical copies, and a seq-less cancel of a registration it never
	// received (c653a90). Off: no such memory (b6a750d).
	seqlessMemory bool
}

var (
	currentRules = simRules{name: "current", seqCompletions: true, seqlessMemory: true}
	legacyRules  = simRules{name: "legacy (b6a750d)"}
)

// The connector's timeouts, scaled down 100 times from the defaults (their
// ratios are what the protocol's safety rests on; the scale only makes a
// run cover many timeouts in few steps).
const (
	simDecodeRT      = 4800 * simMs                      // decode RegistrationTimeout (480 s)
	simPrefillRT     = 4500 * simMs                      // prefill RegistrationTimeout (450 s)
	simCancelTimeout = int64(DefaultCancelTimeout / 100) // decode CancelTimeout (93.3 s)
	simWriteTimeout  = 300 * simMs                       // prefill WriteTimeout (30 s)
	simLease         = 300 * simMs                       // prefill Lease (30 s)
	simBlocks        = 128                               // KV blocks per rank on either side
	simLayers        = 3                                 // layers of the model (K and V regions each): per-layer reports of 1 or 2
	simMaxReqBlocks  = 4
)

// simConfig is one simulation: topology, workload and faults.
type simConfig struct {
	name         string
	preTP, decTP int
	// Workload (probabilities per logical request or attempt).
	seqless   float64 // registered without registration_seq (vLLM's decode)
	exact     float64 // one id on both sides, no suffix (same id on a retry)
	reuse     float64 // a new request reuses an earlier done request's id
	tid       float64 // carries a transfer_id
	retry     float64 // a failed attempt is retried (new suffixes)
	slow      float64 // prefill takes 20-600 ms instead of 1-15 ms
	abortSlow float64 // decode aborts a slow request while it waits
	abortAny  float64 // decode aborts a request at a random moment
	preAbort  float64 // prefill's engine aborts a finished request
	progress  float64 // prefill reports progress (Producer.Progress) before it finishes
	// layerProgress: of those, the share that report per layer too
	// (simAttempt.perLayer).
	layerProgress float64
	// staging is the slots on every rank (simstage_test.go); nil: none.
	staging *simStaging
	// Faults.
	net        simNetConfig
	postFail   float64 // a WRITE fails to post
	flightFail float64 // a WRITE fails in flight
	hang       float64 // a WRITE never ends by itself (the write timeout ends it)
	slowWrite  float64 // a WRITE takes up to 1.1 write timeouts
	noRelease  float64 // the agent keeps a failed WRITE (bytes may move) for up to 0.9 write timeouts
	notifFail  float64 // decode's GenNotif of a PUSH_REG reports an error (the message may still go)
	shakeFail  float64 // a handshake fails
	clockStep  int64   // an engine's clock steps by up to this, either way (0: never)
	clockEvery int64   // mean time between two steps of one engine's clock
	crashEvery int64   // mean time between prefill rank crashes (0: never)
}

// simGeneral is every fault at once, within the assumptions above.
func simGeneral(preTP, decTP int) simConfig {
	c := simConfig{
		name: fmt.Sprintf("all faults, TP %d->%d", preTP, decTP), preTP: preTP, decTP: decTP,
		seqless: 0.25, exact: 0.3, reuse: 0.3, tid: 0.2, retry: 0.5, slow: 0.2, abortSlow: 0.25,
		abortAny: 0.02, preAbort: 0.02,
		postFail: 0.01, flightFail: 0.01, hang: 0.005, slowWrite: 0.05, noRelease: 0.2,
		notifFail: 0.003, shakeFail: 0.1,
		clockStep: 10 * simMs, clockEvery: 2 * simS, crashEvery: 30 * simS,
	}
	c.net = simNetConfig{baseMin: 20 * simUs, baseMax: simMs, long: 0.02, longMax: 50 * simMs,
		lateMin: simMs, lateMax: simS}
	c.net.lossAll(0.01)
	c.net.dupAll(0.03)
	c.net.dup[simCompletion] = 0.1 // late copies of completions meet reused ids more often
	c.net.dup[simPart] = 0.1       // and late copies of parts meet the final chunks and reused ids
	return c
}

// simAttackCompletions is attack (a) alone: requests that reuse the exact id
// of one that just ended done, and late network copies of completions.
func simAttackCompletions(preTP int) simConfig {
	c := simConfig{name: fmt.Sprintf("attack (a) late completion copies, same id, TP %d->1", preTP),
		preTP: preTP, decTP: 1, exact: 1, reuse: 0.6}
	c.net = simNetConfig{baseMin: 20 * simUs, baseMax: simMs, lateMin: simMs, lateMax: 30 * simMs}
	c.net.dup[simCompletion] = 0.3
	return c
}

// simAttackSeqless is attack (b) alone: seq-less registrations, decode
// aborting requests while prefill is slow, and late network copies of
// PUSH_REGs.
func simAttackSeqless() simConfig {
	c := simConfig{name: "attack (b) late copies of cancelled seq-less registrations, TP 1->1",
		preTP: 1, decTP: 1, seqless: 1, retry: 0.5, slow: 0.5, abortSlow: 0.5}
	c.net = simNetConfig{baseMin: 20 * simUs, baseMax: simMs, lateMin: simMs, lateMax: 60 * simMs}
	c.net.dup[simReg] = 0.3
	return c
}

// simSources returns the prefill ranks that write into decode rank d (heads
// split evenly, as descriptors.Sources does for TP sizes that divide; the
// writer core finds the decode ranks it writes into with
// descriptors.Targets, from simLayout's layouts).
func simSources(preTP, decTP, d int) []int {
	if preTP >= decTP {
		r := preTP / decTP
		out := make([]int, r)
		for i := range out {
			out[i] = d*r + i
		}
		return out
	}
	return []int{d / (decTP / preTP)}
}

func simDecodeName(r int) string  { return "decode-" + strconv.Itoa(r) }
func simPrefillName(r int) string { return "prefill-" + strconv.Itoa(r) }

var simPrefillCoords = Prefill{EngineID: "prefill", Host: "prefill.sim", Port: 5600, PPSize: 1}

// ---- the world --------------------------------------------------------------

// simLogical is one of the proxy's requests: its KV is tag L whatever the
// attempt. Its id (base) is lent to a new request only once nothing of it
// is left on either engine (busy == 0) and it ended done: two live requests
// of one id cannot be told apart by a matcher that pairs by id (that is why
// engines append suffixes), so no proxy makes them.
type simLogical struct {
	L       int32
	base    string
	exact   bool
	seqless bool
	busy    int // attempts not over on decode, plus prefill finishes still to come and holds not freed
	done    bool
	lent    bool // in doneBases (model check: at most once)
}

// simAttempt is one attempt of a logical request, sent once to both
// engines.
type simAttempt struct {
	*simLogical
	k       int // attempt number: 0, then retries
	decID   string
	preID   string
	tid     string
	nblocks int
	insts   []*simInst // per decode rank, once registered
	tries   int        // registration attempts (the id or blocks were busy)
	ftries  int        // RequestFinished attempts (the id was still held)
	dropped bool       // decode's engine dropped it (Abort)
	ended   int        // decode ranks whose connector.Result is out
	failed  bool
	// perLayer: prefill reports its progress per layer too (a chunk in
	// its first layers, then in every layer).
	perLayer bool
}

// simInst is an attempt on one decode rank: one decodeReq of its tracker.
type simInst struct {
	att       *simAttempt
	rank      int
	req       *decodeReq
	blocks    []int
	deadline  int64 // decode clock (ns): its connector.Result must be out by then
	published bool
	done      bool
	gaveUp    bool  // published at the cancel timeout, some rank unanswered
	endReal   int64 // when decode ended it (real time, as near as the clock tells)
}

type simStats struct {
	steps, requests, attempts, retries, reused                      int
	done, failed, gaveUpRegister, gaveUpFinish                      int
	sent, lost, dups                                                [simMsgKinds]int
	posted, postFailed, instant, landed, completed, flightFailed    int
	timedOut, cancelling, stale, duplicatesDropped, seqlessDropped  int
	cancelledFirst, cancelNone, cancelDropped, cancelInFlight       int
	lapsedFail, expiredRegs, acksUndeliverable, failsUndeliverable  int
	cancelTimeouts, regTimeouts, crashes, clockSteps, notifFailures int
	handshakeFailures, prefillAborts, decodeAborts, freedPrefill    int
	progressReports, progressWrites, progressAborts                 int
	layerReports                                                    int // per-layer progress reports
	// staging (simstage_test.go)
	stagedParts, partsDeferred, stagedRests, restsNoSlot, stagedWholes int
	stagedWrites, slotsOffered, copyFails                              int
	// part notifications: sent, parts written to a decode that takes
	// none, and what decode's real onStagedPart counted
	partNotes, partsSilent, partScatters, partsDropped, partsRejected int
	partCells, partCopyFails                                          int // cells part scatters copied, part scatters whose copy failed
}

type simViolation struct {
	seed  uint64
	step  int
	class string // the mechanism, where the model can tell (see landAt)
	what  string
	id    string // the request it is about
	trace string
}

func (v *simViolation) String() string {
	return fmt.Sprintf("seed %d, step %d: %s [%s]\nlast events (oldest first):\n%s", v.seed, v.step, v.what, v.class, v.trace)
}

type simWorld struct {
	cfg   simConfig
	rules simRules
	seed  uint64
	rng   simRand
	now   int64
	step  int
	queue simQueue
	seqN  uint64
	// clock offsets: 0 decode engine, 1 prefill engine.
	clock [2]int64
	dec   []*simDecode
	pre   []*simPrefill
	// proxy
	nextL     int32
	suffixN   uint32
	doneBases []*simLogical // ended done, nothing left of them: their ids may be reused
	// decode's engine block table: free blocks, and how many ranks still
	// hold each block (a block is free once every rank handed it back).
	decFree []int
	decHeld []int
	// liveness deadlines (invariant 3) of decode requests.
	live simDeadlines
	// trace and replay hash; watch: a base id whose every entry is kept
	watch   string
	watched []simTraceEntry
	trace   [simTraceLen]simTraceEntry
	traceN  int
	hash    uint64
	// violation is the first one. keepGoing (the long configuration) goes
	// on after a WRITE that lands after release (the model drops its bytes,
	// so nothing downstream is caused by the first), counting them by
	// class; every other violation stops the run.
	violation  *simViolation
	keepGoing  bool
	stop       bool
	violations int
	byClass    map[string]int
	stats      simStats
}

func (w *simWorld) decodeNow() time.Time  { return time.Unix(0, simEpoch+w.now+w.clock[0]) }
func (w *simWorld) prefillNow() time.Time { return time.Unix(0, simEpoch+w.now+w.clock[1]) }

// decodeAt is decode's two clocks for its tracker: the wall clock, which
// steps, and the monotonic one, which never does.
func (w *simWorld) decodeAt() instant {
	return instant{wall: w.decodeNow(), mono: time.Unix(0, simEpoch+w.now)}
}

// fail records a violation (or an inconsistency of the model) that stops
// the run after the step.
func (w *simWorld) fail(format string, args ...any) { w.failID("", format, args...) }

// failID records a violation about request id that stops the run.
func (w *simWorld) failID(id, format string, args ...any) {
	w.violate(false, "stops the run", id, format, args...)
}

// violate records a violation of class about request id; the run stops
// unless it may go on (goOn) and keepGoing is set.
func (w *simWorld) violate(goOn bool, class, id, format string, args ...any) {
	w.violations++
	if w.byClass == nil {
		w.byClass = map[string]int{}
	}
	w.byClass[class]++
	w.note("VIOLATION", -1, id, 0, int64(w.violations))
	if !goOn || !w.keepGoing {
		w.stop = true
	}
	if w.violation != nil {
		return
	}
	w.violation = &simViolation{seed: w.seed, step: w.step, class: class, what: fmt.Sprintf(format, args...), id: id}
	w.violation.trace = w.traceString()
}

func newSimWorld(cfg simConfig, rules simRules, seed uint64) *simWorld {
	w := &simWorld{cfg: cfg, rules: rules, seed: seed, rng: newSimRand(seed), hash: 14695981039346656037, decHeld: make([]int, simBlocks)}
	for b := simBlocks - 1; b >= 0; b-- {
		w.decFree = append(w.decFree, b)
	}
	for r := 0; r < cfg.decTP; r++ {
		w.dec = append(w.dec, newSimDecode(w, r))
	}
	for p := 0; p < cfg.preTP; p++ {
		w.pre = append(w.pre, newSimPrefill(w, p, 1))
	}
	for r := range w.dec {
		w.schedule(&simEvent{at: w.rng.between(0, simMs), kind: evDecodeTick, rank: r})
	}
	for p := range w.pre {
		w.schedule(&simEvent{at: w.rng.between(0, simMs), kind: evPrefillTick, rank: p})
	}
	w.schedule(&simEvent{at: w.rng.between(0, 5*simMs), kind: evArrival})
	if cfg.clockStep > 0 {
		for e := 0; e < 2; e++ {
			w.schedule(&simEvent{at: w.rng.between(0, 2*cfg.clockEvery), kind: evClockStep, rank: e})
		}
	}
	if cfg.crashEvery > 0 {
		// The first crash comes early (a short run sees one); later ones
		// every crashEvery on average, far apart compared with decode's
		// registration timeout, which the requests of a crashed rank wait
		// out.
		w.schedule(&simEvent{at: w.rng.between(simS/2, 2*simS), kind: evCrash, rank: w.rng.intn(cfg.preTP)})
	}
	return w
}

// run handles up to steps events, checking the invariants after each.
func (w *simWorld) run(steps int) {
	for ; w.step < steps && !w.stop && len(w.queue) > 0; w.step++ {
		ev := w.queue.pop()
		w.now = ev.at
		w.handle(ev)
		w.checkLiveness()
	}
	w.stats.steps = w.step
	for _, p := range w.pre {
		p.harvest()
	}
	for _, d := range w.dec {
		d.harvest()
	}
}

func (w *simWorld) handle(ev *simEvent) {
	switch ev.kind {
	case evDeliver:
		m := ev.msg
		what := simDeliverNames[m.kind]
		if m.copy {
			what = simCopyNames[m.kind]
		}
		w.note(what, m.to, m.id, m.seq, int64(m.from))
		if m.toDecode {
			w.dec[m.to].onMessage(m)
		} else {
			w.pre[m.to].onMessage(m)
		}
	case evDecodeTick:
		w.dec[ev.rank].tick()
		w.schedule(&simEvent{at: w.now + w.rng.between(simMs, 5*simMs), kind: evDecodeTick, rank: ev.rank})
	case evPrefillTick:
		w.pre[ev.rank].tick()
		w.schedule(&simEvent{at: w.now + w.rng.between(simMs, 5*simMs), kind: evPrefillTick, rank: ev.rank})
	case evArrival:
		if ev.att != nil {
			w.arrive(ev.att) // a retry
			return
		}
		w.arrive(w.newRequest())
		w.schedule(&simEvent{at: w.now + w.rng.between(2*simMs, 12*simMs), kind: evArrival})
	case evDecodeRegister:
		w.decodeRegister(ev.att)
	case evPrefillFinish:
		w.prefillFinish(ev.att)
	case evDecodeAbort:
		w.decodeAbort(ev.att)
	case evPrefillAbort:
		w.prefillAbort(ev.att)
	case evPrefillProgress:
		w.prefillProgress(ev.att)
	case evDecodeShake:
		w.note("decode handshake ends", ev.rank, "", 0, b2i(ev.ok))
		w.dec[ev.rank].shakeDone(ev.key, ev.ok)
	case evPrefillShake:
		p := w.pre[ev.rank]
		if p.up && p.inc == ev.inc {
			w.note("prefill handshake ends", ev.rank, "", 0, b2i(ev.ok))
			p.shakeDone(ev.key, ev.ok)
		}
	case evLand:
		ev.wr.landAt(ev.i)
	case evAgentEnd:
		ev.wr.agentEnd()
	case evClockStep:
		d := w.rng.between(-w.cfg.clockStep, w.cfg.clockStep)
		w.clock[ev.rank] += d
		w.stats.clockSteps++
		w.note("clock step (0 decode, 1 prefill)", ev.rank, "", 0, d)
		w.schedule(&simEvent{at: w.now + w.rng.between(0, 2*w.cfg.clockEvery), kind: evClockStep, rank: ev.rank})
	case evCrash:
		w.pre[ev.rank].crash()
		w.schedule(&simEvent{at: w.now + w.rng.between(10*simMs, 500*simMs), kind: evRestart, rank: ev.rank})
	case evRestart:
		old := w.pre[ev.rank]
		old.harvest()
		w.pre[ev.rank] = newSimPrefill(w, ev.rank, old.inc+1)
		w.note("prefill rank restarts empty", ev.rank, "", 0, int64(old.inc+1))
		w.schedule(&simEvent{at: w.now + w.rng.between(w.cfg.crashEvery/2, 2*w.cfg.crashEvery), kind: evCrash, rank: w.rng.intn(w.cfg.preTP)})
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// ---- the proxy and the engines ---------------------------------------------

// suffix returns a fresh "-" + 8 hex digits, as an engine appends to the
// proxy's id (distinct for the whole run: a bijection of a counter).
func (w *simWorld) suffix() string {
	w.suffixN++
	return fmt.Sprintf("-%08x", w.suffixN*2654435761)
}

// newRequest is a new logical request from the proxy: a new id, or the id
// of an earlier request that ended done.
func (w *simWorld) newRequest() *simAttempt {
	w.nextL++
	w.stats.requests++
	l := &simLogical{L: w.nextL, seqless: w.rng.chance(w.cfg.seqless)}
	if n := len(w.doneBases); n > 0 && w.rng.chance(w.cfg.reuse) {
		i := w.rng.intn(n)
		old := w.doneBases[i]
		// A seq-less request never reuses an exact id (see the assumptions).
		if !(l.seqless && old.exact) {
			l.base, l.exact = old.base, old.exact
			w.doneBases[i] = w.doneBases[n-1]
			w.doneBases = w.doneBases[:n-1]
			w.stats.reused++
		}
	}
	if l.base == "" {
		l.base = "req" + strconv.Itoa(int(l.L))
		l.exact = !l.seqless && w.rng.chance(w.cfg.exact)
	}
	return w.newAttempt(l, 0)
}

// newAttempt starts attempt k of l (busy until it is over on decode).
func (w *simWorld) newAttempt(l *simLogical, k int) *simAttempt {
	l.busy++
	return &simAttempt{simLogical: l, k: k, nblocks: 1 + w.rng.intn(simMaxReqBlocks)}
}

// unbusy: one attempt or hold of l is over; once none is left, a done
// request lends its id.
func (w *simWorld) unbusy(l *simLogical) {
	if l.busy--; l.busy > 0 || !l.done {
		return
	}
	if l.busy < 0 || l.lent {
		w.fail("model: logical request %d (%q) lent twice", l.L, l.base)
		return
	}
	l.lent = true
	if len(w.doneBases) < 16 {
		w.doneBases = append(w.doneBases, l)
	} else {
		w.doneBases[w.rng.intn(16)] = l
	}
}

// arrive sends attempt a to both engines: decode registers soon, prefill
// finishes after its compute time; either may be first.
func (w *simWorld) arrive(a *simAttempt) {
	w.stats.attempts++
	if a.exact {
		a.decID, a.preID = a.base, a.base
	} else {
		a.decID, a.preID = a.base+w.suffix(), a.base+w.suffix()
	}
	if w.rng.chance(w.cfg.tid) {
		a.tid = "tid-" + strconv.Itoa(int(a.L)) + "." + strconv.Itoa(a.k)
	}
	w.note("proxy sends request (x: logical request)", -1, a.decID, 0, int64(a.L))
	w.schedule(&simEvent{at: w.now + w.rng.between(0, 2*simMs), kind: evDecodeRegister, att: a})
	compute := w.rng.between(simMs, 15*simMs)
	slow := w.rng.chance(w.cfg.slow)
	if slow {
		compute = w.rng.between(20*simMs, 600*simMs)
	}
	a.busy++ // its prefill finish is to come
	w.schedule(&simEvent{at: w.now + compute, kind: evPrefillFinish, att: a})
	switch {
	case slow && w.rng.chance(w.cfg.abortSlow):
		w.schedule(&simEvent{at: w.now + w.rng.between(5*simMs, compute), kind: evDecodeAbort, att: a})
	case w.rng.chance(w.cfg.abortAny):
		w.schedule(&simEvent{at: w.now + w.rng.between(0, simS), kind: evDecodeAbort, att: a})
	}
	if w.rng.chance(w.cfg.preAbort) {
		w.schedule(&simEvent{at: w.now + compute + w.rng.between(0, 400*simMs), kind: evPrefillAbort, att: a})
	}
	if w.cfg.progress > 0 && w.rng.chance(w.cfg.progress) {
		// Chunked prefill: one or two reports before the finish, and
		// now and then the engine drops the request between them.
		at := w.now + w.rng.between(0, compute)
		w.schedule(&simEvent{at: at, kind: evPrefillProgress, att: a})
		if w.rng.chance(0.5) {
			w.schedule(&simEvent{at: w.rng.between(at, w.now+compute), kind: evPrefillProgress, att: a})
		}
		if w.cfg.layerProgress > 0 && w.rng.chance(w.cfg.layerProgress) {
			// Per layer: a third report, and each may give a chunk in
			// its first layers only.
			a.perLayer = true
			w.schedule(&simEvent{at: w.rng.between(at, w.now+compute), kind: evPrefillProgress, att: a})
		}
		if w.rng.chance(0.1) {
			w.schedule(&simEvent{at: w.rng.between(at, w.now+compute), kind: evPrefillAbort, att: a})
		}
	}
}

// prefillProgress: prefill computed some more of the attempt (a chunk):
// the first blocks hold tag L, the others not yet (tag 0), and Progress
// hands the final ones to every rank (the first report takes the blocks;
// a rank that holds the id already, or has too few blocks, reports none).
func (w *simWorld) prefillProgress(a *simAttempt) {
	k := 1 + w.rng.intn(a.nblocks)
	n := 0 // every layer
	if a.perLayer {
		n = 1 + w.rng.intn(simLayers) // simLayers: every layer
	}
	for _, p := range w.pre {
		if p.up {
			p.progress(a, k, n%simLayers)
		}
	}
}

// progress is Producer.Progress of attempt a's first k blocks, per layer
// with n > 0 (blocks after the final ones in the first n layers): as the
// engine reports, a chunk in every layer before the next starts, so while
// a rank's blocks after the final ones are final in some layers only, the
// report is of those blocks (k does not count).
func (p *simPrefill) progress(a *simAttempt, k, n int) {
	h := p.holdOf[a.preID]
	blocks := p.progAll[a.preID]
	switch {
	case p.held[a.preID] == nil:
		if len(p.freeBlocks) < a.nblocks {
			return
		}
		h = &hold{id: a.preID, transferID: a.tid, tokens: a.nblocks * 16}
		for i := 0; i < a.nblocks; i++ {
			j := p.w.rng.intn(len(p.freeBlocks))
			b := p.freeBlocks[j]
			p.freeBlocks[j] = p.freeBlocks[len(p.freeBlocks)-1]
			p.freeBlocks = p.freeBlocks[:len(p.freeBlocks)-1]
			p.content[b], p.layersOf[b] = 0, 0 // not computed yet
			p.holder[b] = h
			blocks = append(blocks, b)
		}
		p.held[a.preID], p.holdOf[a.preID], p.progAll[a.preID] = a, h, blocks
		p.prog[a.preID] = true
		a.busy++
	case p.held[a.preID] != a || !p.prog[a.preID] || p.aborting[a.preID]:
		return // another attempt holds the id, it finished, or it was dropped
	}
	final, tail, layers := p.progTo[a.preID], p.progTail[a.preID], p.progLayers[a.preID]
	if tail > final { // a chunk final in some layers only: it goes on
		k = tail
		if n > 0 && n <= layers {
			return // nothing new
		}
	}
	k = max(k, final)
	if n > 0 {
		if k == final {
			return // no blocks after the final ones
		}
		p.progTail[a.preID], p.progLayers[a.preID] = k, n
		for _, b := range blocks[final:k] {
			p.content[b], p.layersOf[b] = a.L, n
		}
		p.w.stats.progressReports++
		p.w.stats.layerReports++
		p.w.note("prefill reports progress per layer (x: layers)", p.rank, a.preID, 0, int64(n))
		p.progressQ = append(p.progressQ, progressEvent{h: h, blocks: slices.Clone(blocks[:k]), final: final, layers: n, tokens: a.nblocks * 16})
		return
	}
	p.progTo[a.preID], p.progTail[a.preID], p.progLayers[a.preID] = k, k, 0
	for _, b := range blocks[:k] {
		p.content[b], p.layersOf[b] = a.L, 0
	}
	p.w.stats.progressReports++
	p.w.note("prefill reports progress (x: final blocks)", p.rank, a.preID, 0, int64(k))
	p.progressQ = append(p.progressQ, progressEvent{h: h, blocks: slices.Clone(blocks[:k]), final: k, tokens: a.nblocks * 16})
}

// tag is the tag of the bytes prefill holds in block b's region reg: a
// block computed in its first layers only holds no request's bytes in
// the others.
func (p *simPrefill) tag(b, reg int) int32 {
	if l := p.layersOf[b]; l > 0 && reg/2 >= l { // K and V: two regions a layer
		return 0
	}
	return p.content[b]
}

// decodeRegister: decode's engine allocates the attempt's blocks (the same
// ids on every rank) and calls Register on every rank; while the id is
// still pending on a rank or blocks are short it waits.
func (w *simWorld) decodeRegister(a *simAttempt) {
	if a.dropped {
		w.unbusy(a.simLogical) // dropped before it registered: over
		return
	}
	busy := len(w.decFree) < a.nblocks
	for _, d := range w.dec {
		_, live := d.tr.reqs[a.decID]
		_, draining := d.tr.draining[a.decID]
		busy = busy || live || draining
	}
	if busy {
		if a.tries++; a.tries > 40 {
			w.stats.gaveUpRegister++
			w.unbusy(a.simLogical)
			return
		}
		w.schedule(&simEvent{at: w.now + w.rng.between(simMs, 20*simMs), kind: evDecodeRegister, att: a})
		return
	}
	// The engine's block table: the same ids on every rank.
	blocks := make([]int, a.nblocks)
	for i := range blocks {
		j := w.rng.intn(len(w.decFree))
		blocks[i] = w.decFree[j]
		w.decFree[j] = w.decFree[len(w.decFree)-1]
		w.decFree = w.decFree[:len(w.decFree)-1]
		w.decHeld[blocks[i]] = len(w.dec)
	}
	a.insts = make([]*simInst, len(w.dec))
	for r, d := range w.dec {
		a.insts[r] = d.register(a, blocks)
	}
}

// decodeAbort: decode's engine drops the attempt (Consumer.Abort on every
// rank; before it registered, it never will).
func (w *simWorld) decodeAbort(a *simAttempt) {
	a.dropped = true
	w.note("decode engine aborts", -1, a.decID, 0, 0)
	for _, in := range a.insts {
		w.dec[in.rank].abort(in)
	}
}

// prefillFinish: prefill computed the attempt: each rank's blocks hold tag
// L, and RequestFinished hands them over (all ranks in one step; while a
// rank still holds the id, or blocks are short, it waits).
func (w *simWorld) prefillFinish(a *simAttempt) {
	busy := false
	for _, p := range w.pre {
		if p.up && p.prog[a.preID] && p.held[a.preID] == a {
			continue // it reported progress: it holds the blocks
		}
		busy = busy || p.up && (p.held[a.preID] != nil || len(p.freeBlocks) < a.nblocks)
	}
	if busy {
		if a.ftries++; a.ftries > 40 {
			w.stats.gaveUpFinish++
			w.unbusy(a.simLogical)
			return
		}
		w.schedule(&simEvent{at: w.now + w.rng.between(simMs, 20*simMs), kind: evPrefillFinish, att: a})
		return
	}
	w.note("prefill finishes", -1, a.preID, 0, int64(a.L))
	for _, p := range w.pre {
		if p.up {
			p.requestFinished(a)
		}
	}
	w.unbusy(a.simLogical) // the finish came; its holds count now
}

// prefillAbort: prefill's engine drops the attempt (Producer.Abort).
func (w *simWorld) prefillAbort(a *simAttempt) {
	for _, p := range w.pre {
		if p.up && p.held[a.preID] == a {
			if p.prog[a.preID] {
				w.stats.progressAborts++
			}
			w.stats.prefillAborts++
			p.abortRequest(a.preID)
		}
	}
}

// resultOut is decode's engine taking a rank's connector.Result (Drain): a failed
// rank fails the request on every rank; once every rank's connector.Result is out
// a failed request may be retried and a done one may lend its id.
func (w *simWorld) resultOut(in *simInst) {
	a := in.att
	a.ended++
	if !in.done && !a.failed {
		a.failed = true
		for _, o := range a.insts {
			if o != in {
				w.dec[o.rank].abort(o)
			}
		}
	}
	if a.ended < len(w.dec) {
		return
	}
	if !a.failed {
		w.stats.done++
		a.done = true
		w.unbusy(a.simLogical)
		return
	}
	w.stats.failed++
	a.done = false
	if a.k < 3 && w.rng.chance(w.cfg.retry) {
		w.stats.retries++
		r := w.newAttempt(a.simLogical, a.k+1)
		w.schedule(&simEvent{at: w.now + w.rng.between(simMs, 10*simMs), kind: evArrival, att: r})
	}
	w.unbusy(a.simLogical)
}

// ---- invariant 3's deadlines -------------------------------------------------

// simDeadlines is a min-heap of decode requests by the deadline of their
// connector.Result (decode clock).
type simDeadlines []*simInst

func (h *simDeadlines) push(in *simInst) {
	*h = append(*h, in)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[p].deadline <= q[i].deadline {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *simDeadlines) pop() {
	q := *h
	last := len(q) - 1
	q[0] = q[last]
	q[last] = nil
	q = q[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].deadline < q[m].deadline {
			m = l
		}
		if r < len(q) && q[r].deadline < q[m].deadline {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
}

// checkLiveness (invariant 3, "at least once"): every request's connector.Result is
// out by its registration timeout plus the cancel timeout (plus the ticks
// that notice them), on decode's clock. A heap keeps it O(1) a step.
func (w *simWorld) checkLiveness() {
	now := w.decodeNow().UnixNano()
	for len(w.live) > 0 {
		in := w.live[0]
		if in.published {
			w.live.pop()
			continue
		}
		if now > in.deadline {
			w.failID(in.req.id, "invariant 3: request %q (decode rank %d, logical %d) has no connector.Result %v after its registration timeout and cancel timeout",
				in.req.id, in.rank, in.att.L, time.Duration(now-in.deadline))
		}
		return
	}
}

// ---- decode (the real tracker and decode core; the engine and agent modeled)

// simRegKey names a registration of one decode rank: a seq is never
// reused, and a seq-less request's id never is (the assumptions above).
type simRegKey struct {
	id  string
	seq uint64
}

// simDecode is one decode TP rank: the real decode core (decodeCore, with
// the real tracker), fed as the Consumer feeds it, and the edge the core
// acts through, modeled (simDecode implements decodeEdge: the agent, the
// handshake client).
type simDecode struct {
	w       *simWorld
	rank    int
	name    string
	core    *decodeCore
	tr      *tracker
	layout  descriptors.Layout
	seq     uint64
	inc     uint64
	inbox   []*decodeReq
	shakes  []shakeResult
	sources []int
	parts   int
	insts   map[*decodeReq]*simInst
	byReg   map[simRegKey]*simInst // every registration it sent, for the WRITEs prefill posts for them
	out     []*simInst             // published since the engine's last Drain
	owner   []*simInst             // per block: the request registered into it
	regions int
	content []int32 // per block, part and region (cell): the tag of the bytes there (0: poison)
	// staging (simstage_test.go): nil without; slotOwner is the request
	// each slot was offered to.
	st        *simDecodeStage
	slotOwner []*simInst
	inPart    bool // the copier scatters a staged part (onStagedPart)
}

// cell is the index in content of block b's region r of part part.
func (d *simDecode) cell(b, part, r int) int { return (b*d.parts+part)*d.regions + r }

func newSimDecode(w *simWorld, r int) *simDecode {
	d := &simDecode{w: w, rank: r, name: simDecodeName(r), tr: newTracker(time.Duration(simDecodeRT), time.Duration(simCancelTimeout)),
		layout: simLayout(w.cfg.decTP, r), seq: w.rng.r.Uint64() >> 1, inc: w.rng.r.Uint64() | 1,
		insts: map[*decodeReq]*simInst{}, byReg: map[simRegKey]*simInst{},
		sources: simSources(w.cfg.preTP, w.cfg.decTP, r), owner: make([]*simInst, simBlocks)}
	d.parts, d.regions = len(d.sources), len(d.layout.Regions)
	d.content = make([]int32, simBlocks*d.parts*d.regions)
	d.tr.onPublish = d.publish
	st := stats.New()
	d.core = &decodeCore{
		cfg: decodeConfig{engineID: "decode", host: "decode.sim", port: 5601, layout: &d.layout, incarnation: d.inc,
			registrationTimeout: time.Duration(simDecodeRT), cancelTimeout: time.Duration(simCancelTimeout), engineTTL: connector.DefaultEngineTTL},
		edge: d, log: zap.NewNop(), stats: st, push: newPushCounters(st), tracker: d.tr, peers: map[string]*decodePeer{},
	}
	d.core.legacy.anySeqCompletion = !w.rules.seqCompletions
	if w.cfg.staging != nil {
		d.enableStaging(w.cfg.staging)
	}
	return d
}

// register is Consumer.Register.
func (d *simDecode) register(a *simAttempt, blocks []int) *simInst {
	w := d.w
	r := &decodeReq{id: a.decID, transferID: a.tid, prefill: simPrefillCoords, blocks: [][]int{blocks}}
	r.prefill.TPSize = w.cfg.preTP
	if err := d.tr.add(w.decodeAt(), r); err != nil {
		w.fail("model: decode rank %d refused %q: %v", d.rank, a.decID, err)
	}
	if !a.seqless {
		d.seq++
		r.seq = d.seq
	}
	in := &simInst{att: a, rank: d.rank, req: r, blocks: blocks,
		// Ticks notice the timeouts up to 5 ms late, twice, and a clock step
		// (10 ms at most) may fall in either gap: 50 ms is slack enough.
		deadline: w.decodeNow().UnixNano() + simDecodeRT + simCancelTimeout + 50*simMs}
	for _, b := range blocks {
		if d.owner[b] != nil {
			w.fail("model: decode rank %d block %d allocated twice", d.rank, b)
		}
		d.owner[b] = in
	}
	d.insts[r] = in
	d.byReg[simRegKey{r.id, r.seq}] = in
	w.live.push(in)
	d.inbox = append(d.inbox, r)
	w.note("decode Register (x: logical request)", d.rank, r.id, r.seq, int64(a.L))
	return in
}

// abort is Consumer.Abort for this rank's request in (if it is still
// live: the engine never has two requests of one id).
func (d *simDecode) abort(in *simInst) {
	if d.tr.live(in.req) {
		d.w.stats.decodeAborts++
		d.w.note("decode Abort", d.rank, in.req.id, in.req.seq, 0)
		d.tr.fail(d.w.decodeAt(), in.req.id, fmt.Errorf("%w: request %q was aborted by the engine", connector.ErrAborted, in.req.id))
	}
}

// tick is Consumer.tick (the decode core's tick), then the engine's Drain.
func (d *simDecode) tick() {
	w := d.w
	shakes, inbox := d.shakes, d.inbox
	d.shakes, d.inbox = nil, nil
	gaveUp := d.core.push.cancelTimeouts.Load()
	d.core.tick(shakes, inbox)
	if n := d.core.push.cancelTimeouts.Load() - gaveUp; n > 0 {
		w.note("decode gives up waiting for cancel answers (cancel timeout)", d.rank, "", 0, int64(n))
	}
	d.tr.drain()
	d.checkSlots()
	out := d.out
	d.out = nil
	for _, in := range out {
		w.resultOut(in)
	}
}

// harvest adds what the rank's decode core counted to the run's totals.
func (d *simDecode) harvest() {
	c, s := d.core.push, &d.w.stats
	s.stale += int(c.staleCompletions.Load())
	s.regTimeouts += int(c.timeouts.Load())
	s.cancelTimeouts += int(c.cancelTimeouts.Load())
	s.partScatters += int(c.stagedParts.Load())
	s.partsDropped += int(c.stagedPartsDropped.Load())
	s.partsRejected += int(c.stagedPartsRejected.Load())
}

// onMessage is the Consumer's poller dispatch: onCompletion, onFailure,
// onCancelAck of the decode core.
func (d *simDecode) onMessage(m *simMsg) {
	sender := simPrefillName(m.from)
	switch m.kind {
	case simCompletion, simPart:
		if d.onStaged(sender, m.b) {
			return
		}
		d.core.onCompletion(sender, m.b)
	case simFail:
		d.core.onFailure(sender, m.b)
	case simCancelAck:
		d.core.onCancelAck(sender, m.b)
	}
}

// ---- the decode core's edge, modeled ----

func (d *simDecode) lock()   {}
func (d *simDecode) unlock() {}

var errSimPeerGone = errors.New("simulated: the prefill rank is down")

// notify is the decode agent's GenNotif to a prefill rank: an error when
// the rank is down; otherwise, rarely for a PUSH_REG, an error although
// the message may still go out ("counted as sent before the call").
func (d *simDecode) notify(to string, msg []byte) error {
	w := d.w
	p, _ := strconv.Atoi(to[len("prefill-"):])
	m := &simMsg{from: d.rank, to: p, b: msg}
	if strings.HasPrefix(string(msg), pushwire.CancelPrefix) {
		c, err := pushwire.DecodeCancel(msg)
		if err != nil {
			w.fail("model: decode sent a PUSH_CANCEL it cannot decode: %v", err)
			return nil
		}
		m.kind, m.id, m.seq = simCancel, c.RequestID, c.Seq
	} else {
		reg, err := pushwire.DecodeRegistration(msg)
		if err != nil {
			w.fail("model: decode sent a notification it cannot decode: %v", err)
			return nil
		}
		m.kind, m.id, m.seq = simReg, reg.RequestID, reg.Seq
	}
	pre := w.pre[p]
	if !pre.up {
		w.note("decode GenNotif fails: prefill rank down", p, m.id, m.seq, int64(m.kind))
		return errSimPeerGone
	}
	m.dstIn = pre.inc
	if m.kind == simReg && w.rng.chance(w.cfg.notifFail) {
		w.stats.notifFailures++
		w.note("decode GenNotif reports an error", p, m.id, m.seq, int64(m.kind))
		if w.rng.chance(0.5) {
			w.send(m)
		}
		return errors.New("simulated GenNotif failure")
	}
	w.send(m)
	return nil
}

// handshake is the handshake client's Get: it ends a little later, or
// fails.
func (d *simDecode) handshake(key string, _ Prefill) {
	w := d.w
	w.schedule(&simEvent{at: w.now + w.rng.between(200*simUs, 3*simMs), kind: evDecodeShake, rank: d.rank, key: key, ok: !w.rng.chance(w.cfg.shakeFail)})
}

// shakeDone is a handshake's result reaching the rank: prefill's payload,
// with every prefill rank's layout and agent, or a failure.
func (d *simDecode) shakeDone(key string, ok bool) {
	w := d.w
	if !ok {
		w.stats.handshakeFailures++
		d.shakes = append(d.shakes, shakeResult{key: key, err: fmt.Errorf("%w: simulated", connector.ErrHandshake)})
		return
	}
	pl := &handshake.Payload{EngineID: simPrefillCoords.EngineID, TPSize: w.cfg.preTP, PPSize: 1, BlockSize: 16}
	for p := range w.cfg.preTP {
		pl.Ranks = append(pl.Ranks, handshake.Rank{TPRank: p, Agent: simPrefillName(p), Metadata: []byte(simPrefillName(p)), Layout: simLayout(w.cfg.preTP, p), Incarnation: 1})
	}
	d.shakes = append(d.shakes, shakeResult{key: key, payload: pl})
}

func (d *simDecode) forgetHandshake(Prefill)                       {}
func (d *simDecode) loadMD(agent string, _ []byte) (string, error) { return agent, nil }
func (d *simDecode) unloadMD(string) error                         { return nil }
func (d *simDecode) closing() bool                                 { return false }
func (d *simDecode) signal()                                       {}
func (d *simDecode) now() instant                                  { return d.w.decodeAt() }

// stagingOffer is the Consumer's offerStaging (simstage_test.go), or none.
func (d *simDecode) stagingOffer(p *decodePeer, r *decodeReq) *pushwire.Staging {
	if d.st == nil {
		return nil
	}
	return d.offer(p, r)
}

// publish is the tracker's onPublish: the request's connector.Result goes out and
// its blocks go back to the engine, which poisons them. Invariants 1, 3
// (once) and 4 are checked here.
func (d *simDecode) publish(r *decodeReq) {
	w := d.w
	in := d.insts[r]
	if in == nil {
		w.failID(r.id, "invariant 3: decode rank %d published request %q (seq %d) twice, or one never registered", d.rank, r.id, r.seq)
		return
	}
	delete(d.insts, r)
	in.published = true
	in.done = r.result.Err == nil
	in.gaveUp = len(r.waiting()) > 0
	in.endReal = r.result.End.UnixNano() - simEpoch - w.clock[0]
	w.note("decode connector.Result out (x: 1 done, 0 failed)", d.rank, r.id, r.seq, b2i(in.done))
	for _, b := range in.blocks {
		if d.owner[b] != in {
			w.failID(r.id, "invariant 4: decode rank %d hands block %d back for %q, but it is not that request's (handed back twice)", d.rank, b, r.id)
			return
		}
		if in.done {
			for part := 0; part < d.parts; part++ {
				for reg := 0; reg < d.regions; reg++ {
					if got := d.content[d.cell(b, part, reg)]; got != in.att.L {
						w.failID(r.id, "invariant 1: request %q (logical %d) is done on decode rank %d, but block %d part %d (prefill rank %d) region %d holds bytes of logical request %d (0: poison)",
							r.id, in.att.L, d.rank, b, part, d.sources[part], reg, got)
						return
					}
				}
			}
		}
	}
	for _, b := range in.blocks {
		d.owner[b] = nil
		clear(d.content[d.cell(b, 0, 0):d.cell(b+1, 0, 0)])
		if w.decHeld[b]--; w.decHeld[b] == 0 {
			w.decFree = append(w.decFree, b)
		}
	}
	d.out = append(d.out, in)
}

// ---- prefill (the real writer core; the engine, agent and shell modeled) ----

// simWrite is the modeled agent's transfer of one WRITE the real writer
// core posted (its write).
type simWrite struct {
	p        *simPrefill
	wr       *write
	inst     *simInst // the decode request it writes into
	srank    int      // that request's decode rank
	id       string
	seq      uint64
	src, dst []int
	// layers: per index of src, the layers [lo, hi) it writes (a
	// per-layer WRITE); nil: every layer.
	layers [][2]int
	part   int
	// The agent's side.
	status   int8 // 0 moving, 1 completed, -1 failed
	willFail bool
	landed   []bool
	posted   int64 // real time
	letGo    int64 // real time from which ReleaseXferReq succeeds
	released bool  // the agent let go: no byte moves any more
	dead     bool  // its rank crashed
	notif    []byte
	// What the simulation counted of it.
	timedOut, cancelling bool
	// A staged WRITE (simstage_test.go) moves cells, not blocks: moves
	// (landed per move), and each chunk's staged completion (for a
	// progressive part: its PUSH_STAGED_PART, or none to a decode that
	// takes no parts), of kind chunkKind.
	staged    bool
	moves     []simMove
	chunkMsgs [][]byte
	chunkKind simMsgKind
}

// simPrefill is one prefill TP rank: the real writer core (writeCore,
// with the real matcher and memories), fed as the Producer's shell feeds
// it, and the edge the core acts through, modeled (simPrefill implements
// writeEdge: the agent, the handshake client, the engine's blocks).
type simPrefill struct {
	w    *simWorld
	rank int
	name string
	inc  int
	up   bool
	core *writeCore
	// cancelInFlight counts the PUSH_CANCELs of WRITEs in flight (the
	// core keeps no counter of its own for them).
	cancelInFlight int
	// The Producer's state (its shell): ids given and not yet freed, the
	// engine's aborts, and what the next tick hands the core.
	held     map[string]*simAttempt
	holdOf   map[string]*hold
	aborting map[string]bool
	finished []*hold
	aborts   []string
	shakes   []shakeResult
	// Progress (Producer.Progress): ids that reported and have not
	// finished, how many blocks they reported, and the reports for the
	// next tick.
	prog    map[string]bool
	progTo  map[string]int
	progAll map[string][]int // the blocks of each (the core's hold keeps the final ones)
	// progTail and progLayers: per-layer reports (simAttempt.perLayer),
	// the blocks up to progTail final in the first progLayers layers.
	progTail   map[string]int
	progLayers map[string]int
	progressQ  []progressEvent
	// The agent: WRITEs it holds, and the decode agents whose metadata it
	// has loaded (a notification to any other fails with ErrNotFound).
	writes map[*write]*simWrite
	loaded map[string]bool
	// st is the rank's staging (simstage_test.go), nil without.
	st *simPrefillStage
	// The engine's memory on this rank: per block the tag of its bytes,
	// in its first layersOf layers only where that is not 0 (a chunk
	// computed in some layers).
	content    []int32
	layersOf   []int
	freeBlocks []int
	holder     []*hold
}

// simLayout is a rank's KV layout for the real core's handshake checks
// (descriptors.Compatible, Targets): 8 KV heads, split by TP.
func simLayout(tp, rank int) descriptors.Layout {
	g := descriptors.Geometry{Layers: simLayers, KVHeads: 8, HeadDim: 4, DType: "bfloat16", BlockSize: 16, Blocks: simBlocks, TPSize: tp}
	l, err := g.Layout(nixl.DRAM, rank, nixl.Desc{Addr: 1 << 20, Len: g.RankBytes()})
	if err != nil {
		panic(err)
	}
	return l
}

func newSimPrefill(w *simWorld, rank, inc int) *simPrefill {
	p := &simPrefill{w: w, rank: rank, name: simPrefillName(rank), inc: inc, up: true,
		held: map[string]*simAttempt{}, holdOf: map[string]*hold{}, aborting: map[string]bool{},
		prog: map[string]bool{}, progTo: map[string]int{}, progAll: map[string][]int{}, progTail: map[string]int{}, progLayers: map[string]int{},
		layersOf: make([]int, simBlocks),
		writes:   map[*write]*simWrite{}, loaded: map[string]bool{},
		content: make([]int32, simBlocks), holder: make([]*hold, simBlocks)}
	for b := simBlocks - 1; b >= 0; b-- {
		p.freeBlocks = append(p.freeBlocks, b)
	}
	layout := simLayout(w.cfg.preTP, rank)
	st := stats.New()
	c, err := newWriteCore(writeConfig{
		engineID: simPrefillCoords.EngineID, tpSize: w.cfg.preTP, ppSize: 1, world: w.cfg.preTP, layout: &layout,
		registrationTimeout: time.Duration(simPrefillRT), writeTimeout: time.Duration(simWriteTimeout), lease: time.Duration(simLease),
		engineTTL: connector.DefaultEngineTTL, maxPeers: DefaultMaxPeers, maxPending: DefaultMaxPendingRegistrations,
	}, p, zap.NewNop(), st, newPushCounters(st))
	if err != nil {
		panic(err)
	}
	c.legacy.plainCompletions = !w.rules.seqCompletions
	c.mem.noSeqless = !w.rules.seqlessMemory
	p.core = c
	if w.cfg.staging != nil {
		p.enableStaging(w.cfg.staging)
	}
	return p
}

// now is the rank's two clocks (the edge's now): the configured one,
// which steps, and the monotonic one, which never does.
func (p *simPrefill) now() instant {
	return instant{wall: p.w.prefillNow(), mono: time.Unix(0, simEpoch+p.w.now)}
}

// crash: the rank's process dies. Its WRITEs stop (each remaining block may
// land at the crash), its state is gone, and messages to it die with its
// connections (simMsg.dstIn).
func (p *simPrefill) crash() {
	if !p.up {
		return
	}
	w := p.w
	w.stats.crashes++
	w.note("prefill rank crashes", p.rank, "", 0, int64(len(p.core.inflight)))
	for _, wr := range p.core.inflight { // in the core's order: the seed's
		sw := p.writes[wr]
		for i := range sw.landed {
			if w.rng.chance(0.3) {
				sw.landAt(i)
			}
		}
		sw.dead = true
	}
	p.up = false
	ids := make([]string, 0, len(p.held))
	for id := range p.held {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the order decides which ids are lent first: keep it the seed's
	for _, id := range ids {
		w.unbusy(p.held[id].simLogical)
	}
}

// requestFinished is Producer.RequestFinished: the blocks hold L's bytes.
func (p *simPrefill) requestFinished(a *simAttempt) {
	if p.prog[a.preID] && p.held[a.preID] == a {
		// It reported progress: the same blocks, every one computed now;
		// refused after the engine dropped it (Producer.Abort).
		delete(p.prog, a.preID)
		if p.aborting[a.preID] {
			return
		}
		blocks := p.progAll[a.preID]
		for _, b := range blocks {
			p.content[b], p.layersOf[b] = a.L, 0
		}
		p.finished = append(p.finished, &hold{id: a.preID, transferID: a.tid, blocks: slices.Clone(blocks), tokens: a.nblocks * 16, finished: p.now().wall})
		return
	}
	h := &hold{id: a.preID, transferID: a.tid, finished: p.now().wall, tokens: a.nblocks * 16}
	for i := 0; i < a.nblocks; i++ {
		j := p.w.rng.intn(len(p.freeBlocks))
		b := p.freeBlocks[j]
		p.freeBlocks[j] = p.freeBlocks[len(p.freeBlocks)-1]
		p.freeBlocks = p.freeBlocks[:len(p.freeBlocks)-1]
		p.content[b] = a.L
		p.holder[b] = h
		h.blocks = append(h.blocks, b)
	}
	p.held[a.preID] = a
	p.holdOf[a.preID] = h
	a.busy++
	p.finished = append(p.finished, h)
}

// abortRequest is Producer.Abort.
func (p *simPrefill) abortRequest(id string) {
	if p.held[id] == nil || p.aborting[id] {
		return
	}
	p.aborting[id] = true
	p.aborts = append(p.aborts, id)
	p.w.note("prefill Abort", p.rank, id, 0, 0)
}

// tick is the shell's writer.tick: the core's round, with the handshakes
// that ended and the requests that finished or were aborted since.
func (p *simPrefill) tick() {
	if !p.up {
		return
	}
	shakes, finished, aborts, progress := p.shakes, p.finished, p.aborts, p.progressQ
	p.shakes, p.finished, p.aborts, p.progressQ = nil, nil, nil, nil
	progressWriter{p.core}.progress(progress)
	p.core.tick(shakes, finished, aborts)
	p.checkSlots()
}

// onMessage is the shell's poller dispatch.
func (p *simPrefill) onMessage(m *simMsg) {
	if !p.up || m.dstIn != p.inc {
		p.w.note("net: dropped, its connection died with the rank", p.rank, m.id, m.seq, int64(m.kind))
		return
	}
	sender := simDecodeName(m.from)
	switch m.kind {
	case simReg:
		p.core.onRegistration(sender, m.b)
	case simCancel:
		acks := p.acksOwed()
		cancels{p.core}.onCancel(sender, m.b)
		if p.acksOwed() > acks {
			p.w.stats.cancelInFlight++
			p.cancelInFlight++
		}
	}
}

// acksOwed is how many PUSH_CANCELs the rank answers when their WRITEs end.
func (p *simPrefill) acksOwed() int {
	n := 0
	for _, wr := range p.core.inflight {
		n += len(wr.acks)
	}
	return n
}

// harvest adds what the rank's writer core counted to the run's totals,
// once: when the rank restarts (the core is gone) or the run ends.
func (p *simPrefill) harvest() {
	c, s := p.core.push, &p.w.stats
	s.duplicatesDropped += int(c.duplicates.Load())
	s.seqlessDropped += int(c.seqlessCopies.Load())
	s.cancelledFirst += int(c.cancelledFirst.Load())
	s.cancelDropped += int(c.cancelDropped.Load())
	s.cancelNone += int(c.cancelReceived.Load()-c.cancelDropped.Load()) - p.cancelInFlight
	s.lapsedFail += int(c.afterLease.Load())
	s.expiredRegs += int(c.unmatchedExp.Load())
	s.acksUndeliverable += int(c.cancelAckUndeliver.Load())
	s.failsUndeliverable += int(c.failUndeliver.Load())
}

// ---- the writer core's edge, modeled ----

var errSimUnloaded = fmt.Errorf("simulated: decode agent's metadata not loaded: %w", nixl.ErrNotFound)

// notify is GenNotif: it fails until the decode agent's metadata is loaded.
func (p *simPrefill) notify(to string, msg []byte) error {
	w := p.w
	if !p.loaded[to] {
		return errSimUnloaded
	}
	d, _ := strconv.Atoi(to[len("decode-"):])
	m := &simMsg{toDecode: true, from: p.rank, to: d, b: msg}
	switch {
	case strings.HasPrefix(string(msg), pushwire.FailPrefix):
		f, err := pushwire.DecodeFailure(msg)
		if err != nil {
			w.fail("model: prefill sent a PUSH_FAIL it cannot decode: %v", err)
			return nil
		}
		m.kind, m.id, m.seq = simFail, f.RequestID, f.Seq
		w.note(simFailNotes[f.Kind], p.rank, f.RequestID, f.Seq, int64(d))
	case strings.HasPrefix(string(msg), pushwire.CancelAckPrefix):
		a, err := pushwire.DecodeCancelAck(msg)
		if err != nil {
			w.fail("model: prefill sent a PUSH_CANCEL_ACK it cannot decode: %v", err)
			return nil
		}
		m.kind, m.id, m.seq = simCancelAck, a.RequestID, a.Seq
	default:
		comp, err := notif.DecodeSeqCompletion(msg)
		if err != nil {
			w.fail("model: prefill sent a notification it cannot decode: %q: %v", msg, err)
			return nil
		}
		m.kind, m.id, m.seq = simCompletion, comp.ID, comp.Seq
	}
	w.send(m)
	return nil
}

// handshake is the handshake client's Get: it ends a little later, or
// fails.
func (p *simPrefill) handshake(de *decodeEngine) {
	w := p.w
	w.schedule(&simEvent{at: w.now + w.rng.between(200*simUs, 3*simMs), kind: evPrefillShake, rank: p.rank, inc: p.inc, key: de.key, ok: !w.rng.chance(w.cfg.shakeFail)})
}

// shakeDone is a handshake's result reaching the rank: decode's payload,
// with every decode rank's layout, agent and incarnation.
func (p *simPrefill) shakeDone(key string, ok bool) {
	w := p.w
	if !ok {
		w.stats.handshakeFailures++
		p.shakes = append(p.shakes, shakeResult{key: key, err: errors.New("simulated handshake failure")})
		return
	}
	pl := &handshake.Payload{EngineID: "decode", TPSize: w.cfg.decTP, PPSize: 1, BlockSize: 16}
	for r, d := range w.dec {
		pl.Ranks = append(pl.Ranks, handshake.Rank{TPRank: r, Agent: d.name, Metadata: []byte(d.name), Layout: simLayout(w.cfg.decTP, r), Incarnation: d.inc, Staging: w.decodeStagingInfo()})
	}
	p.shakes = append(p.shakes, shakeResult{key: key, payload: pl})
}

func (p *simPrefill) forgetHandshake(*decodeEngine) {}

func (p *simPrefill) loadMD(agent string, _ []byte) (string, error) {
	p.loaded[agent] = true
	return agent, nil
}

func (p *simPrefill) unloadMD(agent string) error {
	delete(p.loaded, agent)
	return nil
}

func (p *simPrefill) aborted(id string) bool { return p.aborting[id] }

// post is the shell's mapping and the agent's CreateXferReq and
// PostXferReq: the WRITE fails to post, completes at once, or moves (its
// transfer planned here).
func (p *simPrefill) post(pr *pendingReg, h *hold, msg []byte) postResult {
	w := p.w
	srank, _ := strconv.Atoi(pr.sender[len("decode-"):])
	in := w.dec[srank].byReg[simRegKey{pr.reg.RequestID, pr.reg.Seq}]
	if in == nil {
		w.fail("model: prefill rank %d writes for %q (seq %d), which decode rank %d never registered", p.rank, pr.reg.RequestID, pr.reg.Seq, srank)
		return postResult{what: postFailed, kind: pushwire.FailLayout, err: errors.New("model")}
	}
	dst := pr.reg.LocalBlockIDs[0]
	cached := len(h.blocks) - len(dst) // dstCached: decode holds the first blocks
	if cached < 0 {
		// Decode registered more blocks than the request has.
		return postResult{what: postFailed, kind: pushwire.FailLayout, err: errors.New("simulated: more blocks registered than finished")}
	}
	if p.st != nil {
		if r, staged := p.postFinalStaged(pr, h, in, srank, dst, cached); staged {
			return r
		}
	}
	if w.rng.chance(w.cfg.postFail) {
		w.stats.postFailed++
		return postResult{what: postFailed, kind: pushwire.FailPost, err: errors.New("simulated post failure")}
	}
	// As the shell's postRest: after progressive WRITEs, exactly what
	// they did not write (at least the last block).
	if pr.progress == h && pr.wroteAny(cached) {
		runs := restRuns(pr.mark(), len(h.blocks), simLayers, cached, len(dst))
		return p.postRuns(pr, h, in, srank, runs, dst, cached, msg)
	}
	return p.postBlocks(pr, h, in, srank, h.blocks[cached:], dst, nil, msg)
}

// postRuns posts the WRITE of runs of h's blocks in their layers
// (writer.mapRuns) with completion msg (nil: none).
func (p *simPrefill) postRuns(pr *pendingReg, h *hold, in *simInst, srank int, runs []layerRun, dst []int, cached int, msg []byte) postResult {
	var src, to []int
	var layers [][2]int
	for _, r := range runs {
		for i := r.from; i < r.to; i++ {
			src, to, layers = append(src, h.blocks[i]), append(to, dst[i-cached]), append(layers, [2]int{r.lo, r.hi})
		}
	}
	return p.postBlocks(pr, h, in, srank, src, to, layers, msg)
}

// postPart is the progressive WRITE (writeEdge.postPart), as the shell's:
// the final blocks pr has not had, after decode's prefix hit.
func (p *simPrefill) postPart(pr *pendingReg, h *hold) postResult {
	w := p.w
	srank, _ := strconv.Atoi(pr.sender[len("decode-"):])
	in := w.dec[srank].byReg[simRegKey{pr.reg.RequestID, pr.reg.Seq}]
	dst := pr.reg.LocalBlockIDs[0]
	total := h.tokens / 16
	cached := total - len(dst)
	if in == nil || cached < 0 {
		return postResult{what: postFailed, err: errors.New("simulated: registration does not fit the request")}
	}
	// As the shell's: what became final and pr has not had, whole blocks
	// only where its parts are staged or may be.
	whole := pr.partInto == partStaged
	if !whole && p.st != nil && h.layers > 0 && pr.partInto == partUndecided {
		_, whole = p.st.wr.stageImage(pr, &pr.peer.payload.Ranks[pr.rank].Layout, len(dst))
	}
	runs, want := partRuns(pr.mark(), h, whole, simLayers, cached, total)
	if len(runs) == 0 {
		return postResult{what: postNotify}
	}
	if whole := len(runs) == 1 && runs[0].lo == 0 && runs[0].hi == simLayers; whole && p.st != nil {
		if r, staged := p.postPartStaged(pr, h, in, srank, dst, cached, runs[0].from, runs[0].to); staged {
			return r
		}
	}
	if w.rng.chance(w.cfg.postFail) {
		w.stats.postFailed++
		return postResult{what: postFailed, err: errors.New("simulated post failure")}
	}
	w.stats.progressWrites++
	r := p.postRuns(pr, h, in, srank, runs, dst, cached, nil)
	r.wr.partial, r.wr.to, r.wr.tailTo, r.wr.tailLayers = true, want.full, want.tail, want.layers
	pr.partInto = partDirect
	return r
}

// postBlocks posts a WRITE of src into dst with completion msg (nil: none)
// that completes at once or moves (its transfer planned here).
func (p *simPrefill) postBlocks(pr *pendingReg, h *hold, in *simInst, srank int, src, dst []int, layers [][2]int, msg []byte) postResult {
	w := p.w
	part := 0
	for i, s := range simSources(w.cfg.preTP, w.cfg.decTP, srank) {
		if s == p.rank {
			part = i
		}
	}
	wr := &write{reg: pr, hold: h, deadline: p.now().mono.Add(time.Duration(simWriteTimeout))}
	sw := &simWrite{p: p, wr: wr, inst: in, srank: srank, id: pr.reg.RequestID, seq: pr.reg.Seq, src: src, dst: dst, layers: layers, part: part,
		landed: make([]bool, len(dst)), notif: msg, posted: w.now}
	w.stats.posted++
	w.note("prefill posts WRITE (x: into decode rank)", p.rank, sw.id, sw.seq, int64(srank))
	if w.rng.chance(0.1) { // StatusSuccess at once
		w.stats.instant++
		for i := range sw.landed {
			sw.landAt(i)
		}
		sw.status, sw.released = 1, true
		if msg != nil {
			p.sendCompletion(sw)
		}
		return postResult{what: postCompleted, wr: wr}
	}
	sw.plan()
	p.writes[wr] = sw
	return postResult{what: postInFlight, wr: wr}
}

// sendCompletion is the completion notification that rides a WRITE.
func (p *simPrefill) sendCompletion(sw *simWrite) {
	p.w.send(&simMsg{kind: simCompletion, toDecode: true, from: p.rank, to: sw.srank, b: sw.notif, id: sw.id, seq: sw.seq})
}

// poll is XferStatus.
func (p *simPrefill) poll(wr *write) (bool, error) {
	sw := p.writes[wr]
	switch sw.status {
	case 1:
		sw.released = true
		p.w.stats.completed++
		return true, nil
	case -1:
		p.w.stats.flightFailed++
		return false, errors.New("simulated: WRITE failed in flight")
	}
	if !p.now().mono.Before(wr.deadline) && !sw.timedOut {
		sw.timedOut = true
		p.w.stats.timedOut++
	}
	return false, nil
}

// release is ReleaseXferReq: it succeeds once the agent lets go.
func (p *simPrefill) release(wr *write) bool {
	sw := p.writes[wr]
	if p.w.now < sw.letGo && sw.status != 1 {
		if !sw.cancelling {
			sw.cancelling = true
			p.w.stats.cancelling++
			p.w.note("prefill: failed WRITE not released yet (cancelling)", p.rank, sw.id, sw.seq, 0)
		}
		return false
	}
	sw.released = true
	return true
}

func (p *simPrefill) completed(wr *write) { p.settled(wr) }
func (p *simPrefill) ended(wr *write)     { p.settled(wr) }
func (p *simPrefill) cancel(wr *write)    { p.settled(wr) }

// settled forgets a WRITE that ended and frees its staging slot (the
// shell's freeSlot).
func (p *simPrefill) settled(wr *write) {
	delete(p.writes, wr)
	if p.st != nil {
		p.st.wr.freeSlot(wr.slot)
	}
}

// free is Producer.free plus the engine's DrainFreed: the blocks go back
// and are poisoned.
func (p *simPrefill) free(id string) {
	h, a := p.holdOf[id], p.held[id]
	all, progressed := p.progAll[id]
	delete(p.held, id)
	delete(p.holdOf, id)
	delete(p.aborting, id)
	delete(p.prog, id)
	delete(p.progTo, id)
	delete(p.progAll, id)
	delete(p.progTail, id)
	delete(p.progLayers, id)
	if a == nil {
		p.w.fail("model: prefill rank %d frees %q, which it does not hold (freed twice?)", p.rank, id)
		return
	}
	blocks := h.blocks
	if progressed {
		blocks = all // the core's hold lists only the final ones if it never finished
	}
	p.w.unbusy(a.simLogical)
	p.w.stats.freedPrefill++
	p.w.note("prefill frees blocks", p.rank, id, 0, int64(len(blocks)))
	for _, b := range blocks {
		if p.holder[b] != h {
			p.w.fail("prefill rank %d frees block %d for %q twice", p.rank, b, id)
			return
		}
		p.holder[b] = nil
		p.content[b], p.layersOf[b] = 0, 0
		p.freeBlocks = append(p.freeBlocks, b)
	}
}

// plan draws what the agent does with a WRITE it accepted: when each block
// lands, and how it ends.
func (sw *simWrite) plan() {
	w := sw.p.w
	cfg := &w.cfg
	dur := w.rng.between(50*simUs, 3*simMs)
	if w.rng.chance(cfg.slowWrite) {
		dur = w.rng.between(3*simMs, simWriteTimeout*11/10)
	}
	end := w.now + dur
	hang := w.rng.chance(cfg.hang)
	sw.willFail = !hang && w.rng.chance(cfg.flightFail)
	if hang {
		end = w.now + simWriteTimeout*12/10 // bytes may move until the writer's timeout and beyond
	}
	if w.rng.chance(cfg.noRelease) {
		// The backend cannot cancel at once: bytes may move until it lets
		// go, within 0.9 write timeouts of the writer's first try.
		first := end
		if hang {
			first = w.now + simWriteTimeout
		}
		sw.letGo = first + w.rng.between(0, simWriteTimeout*9/10)
	}
	for i := range sw.landed {
		switch {
		case !sw.willFail && !hang:
			w.schedule(&simEvent{at: w.rng.between(w.now, end), kind: evLand, wr: sw, i: i})
		case w.rng.chance(0.5):
			w.schedule(&simEvent{at: w.rng.between(w.now, end), kind: evLand, wr: sw, i: i})
		case sw.letGo > end:
			// Moves while the agent still holds the failed WRITE.
			w.schedule(&simEvent{at: w.rng.between(end, sw.letGo), kind: evLand, wr: sw, i: i})
		}
	}
	if !hang {
		w.schedule(&simEvent{at: end, kind: evAgentEnd, wr: sw})
	}
}

// moving reports whether the agent may still move the WRITE's bytes.
func (sw *simWrite) moving() bool {
	return !sw.released && !sw.dead && (sw.status == 0 || sw.status == -1 && sw.p.w.now < sw.letGo)
}

// landAt lands block i of the WRITE (if it still moves): invariant 2.
func (sw *simWrite) landAt(i int) {
	if sw.landed[i] || !sw.moving() {
		return
	}
	w := sw.p.w
	sw.landed[i] = true
	w.stats.landed++
	if sw.staged {
		sw.landCell(i)
		return
	}
	in := sw.inst
	d := w.dec[sw.srank]
	b := sw.dst[i]
	w.note("WRITE lands a block (x: block)", d.rank, in.req.id, in.req.seq, int64(b))
	if in.published || d.owner[b] != in {
		// Which rule let it through, where the model can tell: decode
		// gave up waiting (its cancel timeout) while the WRITE still
		// moved, either in flight or held by the agent after it failed.
		class := "other"
		switch {
		case in.published && in.gaveUp && sw.wr.cancelling:
			class = "cancel timeout < failed WRITE the agent had not released (writer's cancelling state)"
		case in.published && in.gaveUp:
			class = "cancel timeout < WRITE in flight (posted before a cancel reached the rank)"
		}
		w.violate(class != "other", class, in.req.id, "invariant 2: a WRITE from prefill rank %d for %q (seq %d, logical %d) landed in block %d of decode rank %d after decode handed it back (connector.Result out: %v, done: %v; gave up at the cancel timeout: %v; WRITE posted %v after decode ended the request, landed %v after it)",
			sw.p.rank, in.req.id, in.req.seq, in.att.L, b, d.rank, in.published, in.done, in.gaveUp,
			time.Duration(sw.posted-in.endReal), time.Duration(w.now-in.endReal))
		return // its bytes do not land: nothing later is this violation's consequence
	}
	for reg := 0; reg < d.regions; reg++ {
		if sw.layers != nil && (reg/2 < sw.layers[i][0] || reg/2 >= sw.layers[i][1]) {
			continue // a layer this WRITE does not move
		}
		d.content[d.cell(b, sw.part, reg)] = sw.p.tag(sw.src[i], reg) // read from prefill's memory as it is now
	}
}

// agentEnd: the WRITE completes (every block lands, the completion
// notification goes out with it) or fails.
func (sw *simWrite) agentEnd() {
	if sw.released || sw.dead || sw.status != 0 {
		return
	}
	w := sw.p.w
	if sw.willFail {
		if sw.staged && len(sw.chunkMsgs) > 1 && w.rng.chance(0.5) {
			sw.sendChunks(w.rng.intn(len(sw.chunkMsgs))) // its first chunks completed
		}
		sw.status = -1
		w.note("agent: WRITE fails in flight", sw.p.rank, sw.id, sw.seq, 0)
		return
	}
	for i := range sw.landed {
		sw.landAt(i)
	}
	sw.status = 1
	w.note("agent: WRITE completes", sw.p.rank, sw.id, sw.seq, 0)
	if sw.staged {
		sw.sendChunks(len(sw.chunkMsgs))
		return
	}
	if sw.notif != nil { // a progressive WRITE notifies nobody
		sw.p.sendCompletion(sw)
	}
}

// ---- running it ---------------------------------------------------------------

// simRun runs one seed of cfg under rules.
func simRun(cfg simConfig, rules simRules, seed uint64, steps int) *simWorld {
	w := newSimWorld(cfg, rules, seed)
	w.run(steps)
	return w
}

// simSeeds returns the seeds to run: GONIXL_SIM_SEED alone, or first..first+n-1.
func simSeeds(t testing.TB, first uint64, n int) []uint64 {
	if s := os.Getenv("GONIXL_SIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GONIXL_SIM_SEED=%q: %v", s, err)
		}
		return []uint64{v}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

func simLong() bool { return os.Getenv("GONIXL_SIM") == "long" }

// simShortSteps is the short configuration's steps a run: 20,000, or a
// quarter under the race detector, which has nothing to find in a
// simulation without goroutines and makes it 20 times slower (the plain
// build runs the whole short configuration).
func simShortSteps() int {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return 5_000
			}
		}
	}
	return 20_000
}

// simConfigs are the all-faults configurations: every pairing the
// connector supports by head splitting.
func simConfigs() []simConfig {
	return []simConfig{simGeneral(1, 1), simGeneral(2, 1), simGeneral(1, 2), simGeneral(2, 2)}
}

// TestSimCurrentRules runs every fault at once against this revision's
// rules and checks every invariant after every step. It also checks that
// the faults happened: a run that exercised nothing would pass vacuously.
// GONIXL_SIM=long: 100 seeds x 1,000,000 steps (one pairing a seed), going
// on after a WRITE that lands after release so that every one is counted.
// With the old default cancel timeout the long run found WRITEs that
// landed after it, held by an agent that could not cancel them (see
// TestSimFindingUnreleasedWriteOutlivesCancelTimeout); with the current
// one it finds none.
func TestSimCurrentRules(t *testing.T) {
	seeds, steps := simSeeds(t, 1, 2), simShortSteps()
	if simLong() {
		seeds, steps = simSeeds(t, 1, 100), 1_000_000
		defer debug.SetGCPercent(debug.SetGCPercent(400)) // the real code allocates; the long run is GC-bound otherwise
	}
	var total simStats
	byClass := map[string]int{}
	shown := map[string]int{}
	var totalSteps, violations, seedsViolated int
	start := time.Now()
	for _, seed := range seeds {
		cfgs := simConfigs()
		if simLong() {
			cfgs = cfgs[seed%uint64(len(cfgs)) : seed%uint64(len(cfgs))+1] // one pairing a seed
		}
		for _, cfg := range cfgs {
			t0 := time.Now()
			w := newSimWorld(cfg, currentRules, seed)
			w.keepGoing = simLong()
			w.run(steps)
			totalSteps += w.stats.steps
			total.add(&w.stats)
			if simLong() {
				t.Logf("seed %3d  %-24s %8d steps (%4.0f s simulated)  %7.0f steps/s  requests %6d done %6d failed %5d  stale %3d  seq-less copies %3d  cancel timeouts %3d  crashes %2d  violations %d",
					seed, cfg.name, w.stats.steps, float64(w.now)/float64(simS), float64(w.stats.steps)/time.Since(t0).Seconds(), w.stats.requests, w.stats.done, w.stats.failed,
					w.stats.stale, w.stats.seqlessDropped, w.stats.cancelTimeouts, w.stats.crashes, w.violations)
			}
			if w.violation == nil {
				continue
			}
			violations += w.violations
			seedsViolated++
			for c, n := range w.byClass {
				byClass[c] += n
			}
			// The first of each class in full, with its request's history
			// (a replay); the others in one line.
			if v := w.violation; shown[v.class] < 1 {
				shown[v.class]++
				t.Errorf("%s, rules %s: %v%s", cfg.name, currentRules.name, v, simHistory(cfg, currentRules, v))
			} else {
				t.Errorf("%s, rules %s: seed %d, step %d: %s [%s] (and %d more in this run)", cfg.name, currentRules.name, v.seed, v.step, v.what, v.class, w.violations-1)
			}
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds, %d steps in %v (%.0f steps/s), every invariant checked after every step: %d violations in %d runs",
		len(seeds), totalSteps, el.Round(time.Millisecond), float64(totalSteps)/el.Seconds(), violations, seedsViolated)
	classes := make([]string, 0, len(byClass))
	for c := range byClass {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	for _, c := range classes {
		t.Logf("  %6d  %s", byClass[c], c)
	}
	t.Logf("totals: %s", total.String())
	if os.Getenv("GONIXL_SIM_SEED") != "" || steps < 20_000 {
		return // one seed, or the race build's shorter run, need not meet every fault
	}
	// The faults and the protocol's paths the run must have gone through.
	for _, c := range []struct {
		what string
		n    int
	}{
		{"done requests", total.done}, {"failed requests", total.failed}, {"retries", total.retries},
		{"reused ids", total.reused}, {"lost messages", sum(total.lost[:])}, {"duplicated messages", sum(total.dups[:])},
		{"WRITE post failures", total.postFailed}, {"WRITEs failed in flight", total.flightFailed},
		{"WRITE timeouts", total.timedOut}, {"WRITEs cancelling", total.cancelling},
		{"stale completions", total.stale}, {"duplicate registrations dropped", total.duplicatesDropped},
		{"seq-less copies dropped", total.seqlessDropped}, {"registrations cancelled before they came", total.cancelledFirst},
		{"cancels of waiting registrations", total.cancelDropped}, {"cancels of WRITEs in flight", total.cancelInFlight},
		{"registration timeouts", total.regTimeouts}, {"cancel timeouts", total.cancelTimeouts},
		{"registrations after the lease", total.lapsedFail}, {"prefill crashes", total.crashes},
		{"clock steps", total.clockSteps}, {"decode aborts", total.decodeAborts}, {"prefill aborts", total.prefillAborts},
		{"handshake failures", total.handshakeFailures}, {"GenNotif failures", total.notifFailures},
	} {
		if c.n == 0 {
			t.Errorf("the simulation never went through %s: it tests less than it claims", c.what)
		}
	}
}

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

func (s *simStats) add(o *simStats) {
	s.steps += o.steps
	s.requests += o.requests
	s.attempts += o.attempts
	s.retries += o.retries
	s.reused += o.reused
	s.done += o.done
	s.failed += o.failed
	s.gaveUpRegister += o.gaveUpRegister
	s.gaveUpFinish += o.gaveUpFinish
	for k := range s.sent {
		s.sent[k] += o.sent[k]
		s.lost[k] += o.lost[k]
		s.dups[k] += o.dups[k]
	}
	s.posted += o.posted
	s.postFailed += o.postFailed
	s.instant += o.instant
	s.landed += o.landed
	s.completed += o.completed
	s.flightFailed += o.flightFailed
	s.timedOut += o.timedOut
	s.cancelling += o.cancelling
	s.stale += o.stale
	s.duplicatesDropped += o.duplicatesDropped
	s.seqlessDropped += o.seqlessDropped
	s.cancelledFirst += o.cancelledFirst
	s.cancelNone += o.cancelNone
	s.cancelDropped += o.cancelDropped
	s.cancelInFlight += o.cancelInFlight
	s.lapsedFail += o.lapsedFail
	s.expiredRegs += o.expiredRegs
	s.acksUndeliverable += o.acksUndeliverable
	s.failsUndeliverable += o.failsUndeliverable
	s.cancelTimeouts += o.cancelTimeouts
	s.regTimeouts += o.regTimeouts
	s.crashes += o.crashes
	s.clockSteps += o.clockSteps
	s.notifFailures += o.notifFailures
	s.handshakeFailures += o.handshakeFailures
	s.prefillAborts += o.prefillAborts
	s.decodeAborts += o.decodeAborts
	s.freedPrefill += o.freedPrefill
	s.progressReports += o.progressReports
	s.layerReports += o.layerReports
	s.progressWrites += o.progressWrites
	s.progressAborts += o.progressAborts
	s.stagedParts += o.stagedParts
	s.partsDeferred += o.partsDeferred
	s.stagedRests += o.stagedRests
	s.restsNoSlot += o.restsNoSlot
	s.stagedWholes += o.stagedWholes
	s.stagedWrites += o.stagedWrites
	s.slotsOffered += o.slotsOffered
	s.copyFails += o.copyFails
	s.partNotes += o.partNotes
	s.partsSilent += o.partsSilent
	s.partScatters += o.partScatters
	s.partsDropped += o.partsDropped
	s.partsRejected += o.partsRejected
	s.partCells += o.partCells
	s.partCopyFails += o.partCopyFails
}

func (s *simStats) String() string {
	return fmt.Sprintf("requests %d (attempts %d, retries %d, reused ids %d), done %d, failed %d; messages sent %d, lost %d, duplicated %d; "+
		"WRITEs posted %d (post failures %d, at once %d, completed %d, failed in flight %d, timed out %d, cancelling %d), blocks landed %d; "+
		"stale completions %d, duplicate registrations dropped %d, seq-less copies dropped %d, cancelled before arrival %d; "+
		"cancels: of waiting %d, in flight %d, of none %d; registration timeouts %d, cancel timeouts %d, prefill expired registrations %d, after lease %d; "+
		"crashes %d, clock steps %d, decode aborts %d, prefill aborts %d, handshake failures %d, GenNotif failures %d; "+
		"undeliverable PUSH_FAIL %d, PUSH_CANCEL_ACK %d",
		s.requests, s.attempts, s.retries, s.reused, s.done, s.failed, sum(s.sent[:]), sum(s.lost[:]), sum(s.dups[:]),
		s.posted, s.postFailed, s.instant, s.completed, s.flightFailed, s.timedOut, s.cancelling, s.landed,
		s.stale, s.duplicatesDropped, s.seqlessDropped, s.cancelledFirst,
		s.cancelDropped, s.cancelInFlight, s.cancelNone, s.regTimeouts, s.cancelTimeouts, s.expiredRegs, s.lapsedFail,
		s.crashes, s.clockSteps, s.decodeAborts, s.prefillAborts, s.handshakeFailures, s.notifFailures,
		s.failsUndeliverable, s.acksUndeliverable)
}

// TestSimReplay: one seed run twice gives the same trace hash, event for
// event; another seed gives another (so the hash says something).
func TestSimReplay(t *testing.T) {
	cfg := simGeneral(2, 1)
	n := simShortSteps()
	a := simRun(cfg, currentRules, 7, n)
	b := simRun(cfg, currentRules, 7, n)
	c := simRun(cfg, currentRules, 8, n)
	if a.hash != b.hash || a.traceN != b.traceN {
		t.Fatalf("seed 7 ran twice: trace hashes %x and %x (%d and %d entries): the simulation is not deterministic", a.hash, b.hash, a.traceN, b.traceN)
	}
	if a.hash == c.hash {
		t.Fatalf("seeds 7 and 8 have the same trace hash %x", a.hash)
	}
	t.Logf("seed 7: %d trace entries, hash %x (twice); seed 8: hash %x", a.traceN, a.hash, c.hash)
}

// TestSimFindsLegacyPushHoles: each attack alone finds a violation against
// b6a750d's rules and none against this revision's, over the same seeds.
func TestSimFindsLegacyPushHoles(t *testing.T) {
	const maxSeeds = 200
	steps := simShortSteps()
	for _, cfg := range []simConfig{simAttackCompletions(1), simAttackCompletions(2), simAttackSeqless()} {
		t.Run(cfg.name, func(t *testing.T) {
			var found *simViolation
			var seeds uint64
			for seed := uint64(1); seed <= maxSeeds && found == nil; seed++ {
				seeds = seed
				found = simRun(cfg, legacyRules, seed, steps).violation
			}
			if found == nil {
				t.Fatalf("legacy rules: no violation in %d seeds x %d steps: the attack does not reach the hole", maxSeeds, steps)
			}
			t.Logf("legacy rules: found at seed %d, step %d: %s", found.seed, found.step, found.what)
			if testing.Verbose() {
				t.Logf("trace:\n%s%s", found.trace, simHistory(cfg, legacyRules, found))
			}
			// The same seeds (at least 3) against this revision: nothing.
			for seed := uint64(1); seed <= max(seeds, 3); seed++ {
				if v := simRun(cfg, currentRules, seed, steps).violation; v != nil {
					t.Errorf("current rules: %v%s", v, simHistory(cfg, currentRules, v))
				}
			}
		})
	}
}

// The simulation's finding, replayed on the real connector (Consumer and
// Producer on loopback agents, default timeouts): a WRITE in flight when
// decode aborts the request, whose agent cannot cancel it (refuseRelease:
// ReleaseXferReq says ErrRepostActive while it moves). Prefill defers the
// PUSH_CANCEL_ACK until the WRITE ends; at its write timeout (30 s) the
// agent will not let go, so the writer keeps it ("cancelling") for up to
// one more write timeout. With the old default cancel timeout (write
// timeout + 10 s = 40 s from the abort) decode handed the blocks back and
// the WRITE landed in them; the default now covers two write timeouts and
// a lost first cancel, and decode keeps the blocks until prefill answers.
func TestSimFindingUnreleasedWriteOutlivesCancelTimeout(t *testing.T) {
	// One clock for the fabric and the connectors. The WRITE takes 50 s
	// and the agent will not release it while it moves: past prefill's
	// write timeout (30 s), within two of them (60 s), as the timeouts
	// assume of an agent.
	fc := connector.NewManualClock(rigStart)
	fab, err := loopback.NewFabric(loopback.WithClock(fc), loopback.WithModel(loopback.Bandwidth(4096.0/50, 0)))
	require.NoError(t, err)
	r := newRig(t, rigConfig{clock: fc, newAgent: func(t testing.TB, name string) nixl.Agent {
		a, err := fab.NewAgent(name)
		require.NoError(t, err)
		if strings.HasPrefix(name, "prefill") {
			return refuseRelease{a}
		}
		return a
	}})
	c, p := r.consumers[0], r.producers[0]
	dst := []int{4}
	zero(t, r.decLayout[0], dst)
	require.NoError(t, c.Register("x", Coordinates(r.pre), dst))
	admitted(t, p, 1)
	fill(t, r.preLayout[0], []int{1}, 3, 16)
	_, err = p.RequestFinished("x", []int{1})
	require.NoError(t, err)
	eventually(t, "WRITE posted", func() bool { return fab.Counters().Posted == 1 })

	require.NoError(t, c.Abort("x"))
	eventually(t, "cancel of the WRITE in flight received", func() bool { return extra(t, p.Stats(), "push_cancel_received") == 1 })
	var got []connector.Result
	handedBack := false
	for step := 0; step < 70 && !handedBack; step++ {
		fc.Advance(time.Second)
		time.Sleep(2 * time.Millisecond)
		if got = c.Drain(); len(got) > 0 {
			// The engine has the blocks back and reuses them at once.
			poison(t, r.decLayout[0], dst)
			handedBack = true
		}
	}
	require.True(t, handedBack, "decode never handed the blocks back")
	require.ErrorIs(t, got[0].Err, connector.ErrAborted)
	fc.Advance(200 * time.Second)
	eventually(t, "WRITE completed in the agent", func() bool { return fab.Counters().Completed == 1 })
	time.Sleep(10 * time.Millisecond)
	assert.True(t, poisoned(t, r.decLayout[0], dst),
		"decode handed the blocks back (cancel timeout %v) while prefill's WRITE, held by an agent that could not cancel it within two write timeouts (%v), could still land: it landed", DefaultCancelTimeout, 2*DefaultWriteTimeout)
	freedOnce(t, p, "x")
}

// TestSimProgressive is TestSimCurrentRules's faults with progressive push:
// half the requests report their blocks final in one or two steps before
// they finish (Producer.Progress), the blocks not yet reported holding no
// request's bytes, and a tenth of those are dropped by prefill's engine
// between a report and the finish. Every invariant holds after every
// step: a block written before it was final would end a request done with
// a wrong byte; a progressive WRITE landing after a cancel's ack, a
// PUSH_FAIL or a free, a write after release.
//
// GONIXL_SIM=long: 20 seeds x 200,000 steps per pairing.
func TestSimProgressive(t *testing.T) {
	seeds, steps := simSeeds(t, 1, 2), simShortSteps()
	if simLong() {
		seeds, steps = simSeeds(t, 1, 20), 200_000
	}
	var total simStats
	for _, seed := range seeds {
		for _, cfg := range simConfigs() {
			cfg.progress, cfg.layerProgress = 0.5, 0.4
			cfg.name += ", progressive"
			w := newSimWorld(cfg, currentRules, seed)
			w.run(steps)
			total.add(&w.stats)
			if w.violation != nil {
				t.Fatalf("seed %d, %s: %s", seed, cfg.name, w.violation.what)
			}
		}
	}
	t.Logf("%d steps: %d requests, %d done, %d failed; %d progress reports (%d per layer), %d progressive WRITEs, %d requests dropped between a report and the finish",
		total.steps, total.requests, total.done, total.failed, total.progressReports, total.layerReports, total.progressWrites, total.progressAborts)
	require.Positive(t, total.progressWrites, "no progressive WRITE")
	require.Positive(t, total.layerReports, "no per-layer report")
	require.Positive(t, total.progressAborts, "no request dropped while it reported progress")
	require.Positive(t, total.done)
}

// TestSimProgressiveReplay: a progressive seed whose prefill reports per
// layer runs three times to the same trace, event for event, and another
// seed to another.
func TestSimProgressiveReplay(t *testing.T) {
	cfg := simConfigs()[1]
	cfg.progress, cfg.layerProgress = 0.5, 0.4
	n := simShortSteps()
	first := simRun(cfg, currentRules, 7, n)
	require.Nil(t, first.violation)
	require.Positive(t, first.stats.layerReports)
	for range 2 {
		again := simRun(cfg, currentRules, 7, n)
		require.Equal(t, first.hash, again.hash, "seed 7 ran again: the progressive simulation is not deterministic")
		require.Equal(t, first.traceN, again.traceN)
	}
	require.NotEqual(t, first.hash, simRun(cfg, currentRules, 8, n).hash)
}
