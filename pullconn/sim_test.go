package pullconn

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl"
)

// A deterministic simulation of the pull protocol, in the style of etcd
// raft's and FoundationDB's: one seed drives a prefill engine and two decode
// engines through delayed, reordered, duplicated and lost messages, wall
// clock steps, crashes, forged, replayed and re-delivered Params, staging
// failures, block reuse, retried ids, late, replayed and foreign
// completions, slow or lost pins, stalled READs and paused decode ranks,
// and after every step the simulation checks that
//
//  1. no decode load is done with bytes other than its request's (and,
//     under the pin rules, 1b: none is done unless the hold each prefill
//     rank pinned is the one that was live as the READ from it completed,
//     and 1c: none is done on a READ that ended, on that rank's
//     monotonic clock, after the pin the rank granted ran out),
//  2. prefill releases every hold it made exactly once (completion,
//     expiry or close), never by expiry before the deadline it advertised
//     (on its wall clock) nor, 2b, before a pin it granted ended (on its
//     monotonic clock), and never, 2c, on a completion naming another hold
//     of the id once the hold was pinned,
//  3. every decode load ends exactly once, and
//  4. the prefill engine never rewrites a block or staging slot while a
//     hold covering it is live.
//
// Clocks. Every engine (and every prefill rank) has a wall clock that
// steps either way by up to 3 s, and a monotonic clock that never steps
// (its own origin, a rate within +-500 ppm, a new one when a rank
// restarts). Leases, Params deadlines, heartbeats and hold queries run on
// the wall clocks, as in the real code (RankConfig.Clock); pins run on the
// monotonic ones (the reader's steady clock, time.Now in production, and
// Producer.pinHold and Producer.tick), on both sides.
//
// What is real code: every decode rank is the production reader
// (reader.go: route, post, poll, pins and verdicts, hold queries and
// heartbeats, the hold deadline, restarts and retries, staging with its
// slot pool, publish) with the Consumer's readGuard; the simulation is only
// its shell (simdecode_test.go): the queue and the answers its next tick
// takes, the side-channel calls it asks for as messages with their
// clients' timeouts, and a NIXL agent whose READs read the prefill blocks
// or slots their remote descriptors name. Every prefill rank is the
// production holder (holder.go, the Producer's core, over a real *holds):
// RequestFinished's hold, the engine's advert and the Params' deadline,
// nonce and key (finish), completions seq-keyed and plain (completion),
// heartbeats, its part of hold queries (extend) and pins (pin, with
// maxPin, on the rank's monotonic clock), expiry (tick), Abort and Close
// (releaseAll); the simulation is its shell as the Producer is: a simRank
// is its edges (the engine's real advert table, adverts, whose nonces come
// from the seed's stream; released holds reported as DrainFreed would)
// and, to the side channel, a holdRank that the real extendRanks and
// confirmRanks fold as Engine.extend and Engine.confirm do. The engine's
// staging slots are a real slotIndex, completions and heartbeats are
// encoded by the reader and parsed by the real notif codecs inside the
// holder, and decode ranks pair with prefill ranks by the real pair and
// notifyRanks. The legacy rules' prefill glue is the cores' own test
// switches: adverts.legacy and holder.legacyQueries.
//
// What is modeled: the prefill engine's side of RequestFinished before the
// hold (the gather into a staging slot: slotIndex.decide, then a copy of
// the blocks' tags; a failed gather holds nothing), the Params'
// TransferParams, the side channel's handshake answer, and the Producer's
// locking: a rank drops a released hold's advert (pullEngine.dropAdverts)
// under its own lock but not the engine's, so another rank's
// RequestFinished may advertise in between, and the simulation sometimes
// runs the drop a little later to open that window; the side-channel
// clients' clock measurement (handshake.measure) and their conversion of
// deadlines; and the Consumer's goroutines (a tick soon after each wake,
// every few milliseconds while a load lives; a pin's verdict applied as it
// comes). The router sends a request's Params to decode engine A, and
// those of a retried id to A or B.
//
// Memory is modeled by tags: every prefill block and slot holds the tag of
// the request (and rank) whose KV it holds; a READ copies the tags at its
// completion, so a block rewritten while a READ is in flight is seen.

// simRules is the decode rule set under test.
type simRules int

const (
	// pinRules: this revision. The READs are posted without a NIXL
	// notification, and a pin (handshake.HoldRef, PinMicros =
	// TransferTimeout + ExpiryMargin) is sent beside them, pinSent noted
	// on decode's monotonic clock. Each prefill rank named answers ""
	// only for exactly that hold (its key) not bound to another engine,
	// binds it and keeps it from expiry until its monotonic now +
	// PinMicros; the pin counts no completion. The load is done only when
	// every rank answered "" and its READs were seen ended no later than
	// pinSent + TransferTimeout (decode's monotonic clock); then decode
	// sends "<id>:<n>#<hold key>" to the ranks it notifies. Prefill counts
	// a keyed completion only for the hold it names, and none without a
	// key at all (holds.keyed: no decode of a pinning prefill sends one);
	// hold queries bind holds to the asking engine.
	pinRules simRules = iota + 1
	// legacyRules: main at b6a750d. Done when the READs completed before the
	// converted deadline (the handshake's clock offset); each READ carries
	// the completion "<id>:<n>"; nothing binds a hold to an engine, and
	// the prefill glue of that revision (no advert nonce, no dropAdverts).
	// The production reader runs them against a prefill that does not pin
	// (Payload.Confirms false), with readerRules.handshakeClock (hold
	// queries never move the clock offset) and readGuard.byID (a read
	// remote request is known by its id alone); the production holder
	// runs them with holder.legacyQueries (hold queries bind nothing) and
	// holds.keyed off, beside an advert table with adverts.legacy (no
	// nonce; a new advert once the old one's deadline passed).
	legacyRules
)

func (r simRules) String() string {
	if r == legacyRules {
		return "legacy"
	}
	return "pin"
}

// simAttack is a set of attacks (fault classes that a decode may not
// survive unless the protocol guards against them).
type simAttack uint32

const (
	atkClockAfterHS    simAttack = 1 << iota // wall clocks step while no READ is in flight
	atkClockDuringRead                       // wall clocks step while a READ is in flight
	atkForge                                 // Params with another id, other blocks, slot, deadline or nonce
	atkReplay                                // Params replayed to decode engine B
	atkStagingFail                           // one prefill rank's gather failed; its Params go out anyway
	atkCrash                                 // a prefill rank crashes and restarts, losing its memory
	atkRetryID                               // a prefill request id is finished again after its hold ended
	// atkPinNet: a pin or its verdict is delayed (past the READs' end,
	// past the call's timeout) or lost, a READ stalls past the
	// TransferTimeout a pin covers, and a decode rank pauses (its reader
	// and side-channel goroutines stop, so no heartbeat, hold query or
	// verdict is handled and READs that end are seen late; its clocks
	// run on).
	atkPinNet
	// atkStaleCompletion: a completion sent earlier (keyed with an
	// earlier hold of the id, or plain) arrives again, preferably while a
	// later hold of the id is held and pinned.
	atkStaleCompletion
	// atkForeignCompletion: a completion for a held id from an agent of
	// another decode engine than the hold's reader (or of a vLLM decode),
	// naming the hold's key, none or a wrong one.
	atkForeignCompletion
	// atkRedeliver: the proxy hands decode engine A the same Params
	// again later (a retried request).
	atkRedeliver
	atkAll = atkClockAfterHS | atkClockDuringRead | atkForge | atkReplay | atkStagingFail | atkCrash | atkRetryID |
		atkPinNet | atkStaleCompletion | atkForeignCompletion | atkRedeliver
)

// Scale: a lease of 2 s where vLLM's is 30 s, so that clock steps of up
// to 3 s and slow messages cross it often.
const (
	simLease           = 2 * time.Second
	simHBInterval      = simLease / 6
	simHBExtension     = simLease * 2 / 3
	simMargin          = 100 * time.Millisecond
	simTransferTimeout = 2 * time.Second
	simCallTimeout     = 500 * time.Millisecond
	simHSTimeout       = time.Second
	// simPinTimeout bounds a pin call: Client.Confirm runs under the
	// client's handshake timeout.
	simPinTimeout = simHSTimeout
	// simKeepAlive is Config.KeepAliveTimeout at this scale (480 s
	// for a 30 s lease), which bounds the readGuard's read guard.
	simKeepAlive = 16 * simLease
	simMonoPPM   = 500
	simBlocks    = 16
	simSlots     = 3
	simMaxReqs   = 6
	simRetryRing = 16
	simCompRing  = 64
)

// simConfig is one simulation's shape. Everything else (the decode
// engines' TP sizes, staging, the block allocator, ParamsAfterAllRanks
// where staging does not force it) is drawn per seed.
type simConfig struct {
	rules   simRules
	attacks simAttack
	// prefillTP is the prefill engine's TP size; 0: 1 or 2 drawn per seed.
	prefillTP int
	// stall is the share of READs atkPinNet stalls; 0: 1 %.
	stall float64
	// mutant breaks one pin rule of the production reader (readerRules),
	// to show that the invariants catch it (TestSimCatchesPinMutants).
	mutant simMutant
}

// simMutant is a deliberately wrong decode pin rule.
type simMutant uint8

const (
	mutNone        simMutant = iota
	mutNoPinWindow           // done whenever the pin was granted, however late the READs ended
	mutShortPin              // PinMicros shorter than TransferTimeout
)

type simResult uint8

const (
	resDone simResult = iota + 1
	resExpired
	resNotHeld
	resTransfer
	resTimeout
	resHandshake
	resAborted
	simResults
)

var simResultNames = [...]string{resDone: "done", resExpired: "expired", resNotHeld: "not-held", resTransfer: "transfer-failed",
	resTimeout: "timeout", resHandshake: "handshake-failed", resAborted: "aborted"}

type simRelease uint8

const (
	relCompletion simRelease = iota + 1 // a NIXL completion (legacy: plain, riding on the READ; pin: keyed, once done)
	relExpire
	relClose // Close or a crash
	simReleases
)

var simReleaseNames = [...]string{relCompletion: "completion", relExpire: "expiry", relClose: "close"}

// simStats are a run's totals.
type simStats struct {
	steps, requests, loads, retries, forged, replayed, crashes, holds int
	// redelivered: Params handed to A again; refused: loads Load refused
	// (checkRemote); pins: pins sent; pinsLate: verdicts "" that came
	// after the load's READs ended; pinsLost: pins or verdicts the
	// atkPinNet fault dropped; stalled: READs it stalled; outlasted:
	// loads failed because their READs ended past pinSent +
	// TransferTimeout; staleSent, foreignSent: completions the two
	// completion attacks sent.
	redelivered, refused, pins, pinsLate, pinsLost, stalled, pauses, outlasted, staleSent, foreignSent int
	// reads are the READs decode posted, staged those of a prefill
	// staging slot (chunked: one of several of a rank's slot) and
	// retried the loads posted again on a restarted rank.
	reads, staged, chunked, retried int
	results                         [simResults]int
	released                        [simReleases]int
	// outcomes counts what holds.complete made of each completion.
	outcomes [completionPlain + 1]int
	simTime  time.Duration
}

func (a *simStats) add(b simStats) {
	a.steps += b.steps
	a.requests += b.requests
	a.loads += b.loads
	a.retries += b.retries
	a.forged += b.forged
	a.replayed += b.replayed
	a.crashes += b.crashes
	a.holds += b.holds
	a.redelivered += b.redelivered
	a.refused += b.refused
	a.pins += b.pins
	a.pinsLate += b.pinsLate
	a.pinsLost += b.pinsLost
	a.stalled += b.stalled
	a.pauses += b.pauses
	a.outlasted += b.outlasted
	a.staleSent += b.staleSent
	a.foreignSent += b.foreignSent
	a.reads += b.reads
	a.staged += b.staged
	a.chunked += b.chunked
	a.retried += b.retried
	a.simTime += b.simTime
	for i := range a.outcomes {
		a.outcomes[i] += b.outcomes[i]
	}
	for i := range a.results {
		a.results[i] += b.results[i]
	}
	for i := range a.released {
		a.released[i] += b.released[i]
	}
}

func (a simStats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d steps (%v simulated), %d requests (%d retried ids), %d holds, %d loads (%d forged, %d replayed), %d crashes; results:",
		a.steps, a.simTime.Round(time.Second), a.requests, a.retries, a.holds, a.loads, a.forged, a.replayed, a.crashes)
	for r := resDone; r < simResults; r++ {
		fmt.Fprintf(&b, " %s %d", simResultNames[r], a.results[r])
	}
	b.WriteString("; holds released by")
	for r := relCompletion; r < simReleases; r++ {
		fmt.Fprintf(&b, " %s %d", simReleaseNames[r], a.released[r])
	}
	fmt.Fprintf(&b, "; %d re-delivered, %d loads refused; %d pins (%d answered after the READs ended, %d lost, %d READs stalled, %d decode pauses, %d loads past their pin)",
		a.redelivered, a.refused, a.pins, a.pinsLate, a.pinsLost, a.stalled, a.pauses, a.outlasted)
	fmt.Fprintf(&b, "; %d READs (%d of a staging slot, %d of them chunks), %d loads retried on a restarted rank", a.reads, a.staged, a.chunked, a.retried)
	fmt.Fprintf(&b, "; completions: %d replayed, %d foreign sent;", a.staleSent, a.foreignSent)
	for o := completionCounted; o <= completionPlain; o++ {
		fmt.Fprintf(&b, " %s %d", simOutcomeNames[o], a.outcomes[o])
	}
	return b.String()
}

var simOutcomeNames = [...]string{completionCounted: "counted", completionDone: "done", completionUnknown: "unknown", completionLate: "late",
	completionInvalid: "invalid", completionDuplicate: "duplicate", completionForeign: "foreign", completionStale: "stale", completionPlain: "plain"}

// simWrongBytes is invariant 1's violation, simUncovered 1b's and
// simOutlasted 1c's.
const (
	simWrongBytes = "done with wrong bytes"
	simUncovered  = "done on a READ no pinned hold covered"
	simOutlasted  = "done on a READ that outlasted its pin"
)

// simViolation is the first invariant a run broke.
type simViolation struct {
	what, detail string
	id           string // the request it concerns, if one
	seed         uint64
	step         int
	t            time.Duration
	trace        string
}

func (v *simViolation) String() string {
	return fmt.Sprintf("seed %d, step %d (t=%v): %s: %s\nlast events:\n%s", v.seed, v.step, v.t, v.what, v.detail, v.trace)
}

// simExplain replays a violation's seed, watching the request it names,
// and returns the violation with that request's history (the replay is
// step for step the same run).
func simExplain(v *simViolation, cfg simConfig, steps int) string {
	out := v.String()
	if v.id == "" {
		return out
	}
	s := newSim(v.seed, cfg)
	s.watch = v.id
	s.run(steps)
	s.finish()
	return out + fmt.Sprintf("history of %s (and every clock step, crash and restart):\n%s", v.id, simFormat(s.watched))
}

// sim is one run.
type sim struct {
	cfg   simConfig
	seed  uint64
	rng   *rand.Rand
	t     time.Duration
	step  int
	seq   uint64
	q     simQueue
	net   simNet
	p     *simPrefill
	d     [2]*simDecode
	stats simStats

	ring  [simTraceLen]simTraceEntry
	ringN int
	hash  uint64
	viol  *simViolation
	// watch, when set, collects every event of that request id (and every
	// clock step, crash and restart) in watched: a replay of a failing
	// seed explains the request the violation names.
	watch   string
	watched []simTraceEntry

	draining       bool
	pinLog         []simPinned                  // what onPin's ranks pinned, in confirmRanks' order
	xfers          map[nixl.XferHandle]*simXfer // READs the decode ranks' agents know
	nextXfer       uint64
	liveLoads      int
	readsInFlight  int
	pendingFinish  int
	pendingParams  int
	nextCid        int
	nextJunk       int
	nextCall       uint64
	nextLoad       int
	retryRing      []string  // ids the engine freed, for atkRetryID
	compRing       []*simMsg // completions decode sent, for atkStaleCompletion
	compNext       int
	lastFreed      string
	reuseNow       float64 // chance that freed blocks are rewritten at once
	rankLag        bool
	prefillAborts  bool
	decodeAborts   bool
	chaosKinds     []int     // the faults the chaos event injects, by kind
	chaosWeights   []float64 // and their weights
	clockGate      int       // 0 any time, 1 only with no READ in flight, 2 only with one
	finishedHolds  int
	releasedHolds  int
	proxySlowShare float64
}

// simPrefill is the prefill engine: its ranks, its block allocator and its
// staging slot index.
type simPrefill struct {
	tp       int
	ranks    []*simRank
	free     []int
	slots    *slotIndex
	staging  bool
	afterAll bool // Config.ParamsAfterAllRanks
	lifo     bool // blocks are allocated most recently freed first (else at random)
	// adverts is the engine's real advert table (pullEngine.adverts).
	adverts adverts
	// rng draws the adverts' nonces (nil: the legacy glue, which has none).
	rng  *rand.Rand
	reqs []*simReq // owning blocks at the engine
	byID map[string]*simReq
	down int
}

// simRank is one prefill rank: the production core (holder, with its
// *holds as h), its clocks, its memory, and the model's ledger of the
// holds it made. It is the holder's edges (holdEdges) and the side
// channel's view of the rank (holdRank).
type simRank struct {
	s         *sim
	r         int
	clock     simClock
	mono      simMono
	hold      *holder
	h         *holds
	adv       time.Time // the deadline of the last advert the rank took
	up        bool
	inc       int // incarnation: a restart loads new agent metadata
	blocks    []uint64
	slotMem   []uint64
	held      map[string]*simHold
	cover     []int // live holds covering each block
	slotCover []int
	nheld     int
	ticking   bool
}

type simHold struct {
	req  *simReq
	key  uint64
	adv  time.Time
	slot int
	// pinUntil is the end of the latest pin the rank granted on the hold,
	// on its monotonic clock (the model's ledger; zero: never pinned).
	pinUntil time.Time
}

// simReq is one request on the prefill engine, from its forward pass until
// the engine frees its blocks.
type simReq struct {
	id       string
	cid      int
	blocks   []int
	stage    bool
	pending  int    // ranks whose RequestFinished has not run
	lost     []bool // by rank: its memory was lost in a crash before it finished
	ranDone  []bool // by rank: its RequestFinished ran
	live     int    // ranks holding it
	params   *Params
	handed   bool
	freed    bool
	failRank int  // staging failure on this rank (-1 none)
	refinish bool // the engine calls RequestFinished again on the failed rank
	// retry: the id is one the engine had freed; the router may send its
	// Params to either decode engine.
	retry bool
}

// simDelivery is Params on their way from the proxy to a decode engine.
type simDelivery struct {
	p     *Params
	truth int
	eng   int
	kind  string
}

func simID(cid int) string { return "r" + strconv.Itoa(cid) }

// simTag is what a block of request cid holds on prefill rank r.
func simTag(cid, r int) uint64 { return uint64(cid)<<1 | uint64(r) }

// simJunkBase starts the content ids of the "other requests" whose bytes
// reused blocks get, and of ids no request ever had.
const simJunkBase = 1 << 40

func newSim(seed uint64, cfg simConfig) *sim {
	s := &sim{cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), hash: 14695981039346656037,
		nextJunk: simJunkBase, xfers: map[nixl.XferHandle]*simXfer{}}
	r := s.rng
	s.net = simNet{loss: 0.02, dup: 0.03, slow: 0.01}
	s.reuseNow = 0.5
	s.rankLag = true
	s.prefillAborts, s.decodeAborts = true, true
	s.proxySlowShare = 0.03

	tp := cfg.prefillTP
	if tp == 0 {
		tp = 1 + r.IntN(2)
	}
	// A scaled limit (the real one is maxAdverts); the legacy rules are
	// the table's own test switch.
	p := &simPrefill{tp: tp, adverts: adverts{limit: 256, legacy: cfg.rules == legacyRules}, byID: map[string]*simReq{}}
	if cfg.rules == pinRules {
		p.rng = r
	}
	p.staging = cfg.attacks&atkStagingFail != 0 || r.IntN(2) == 0
	// A prefill engine of several ranks stages only with
	// ParamsAfterAllRanks; without staging it may hand Params on after the
	// first rank.
	p.afterAll = tp == 1 || p.staging || r.IntN(2) == 0
	p.lifo = r.IntN(2) == 0
	if p.staging {
		p.slots = &slotIndex{}
	}
	for b := range simBlocks {
		p.free = append(p.free, b)
	}
	s.p = p
	for i := range tp {
		rk := &simRank{s: s, r: i, up: true, blocks: make([]uint64, simBlocks), slotMem: make([]uint64, simSlots),
			held: map[string]*simHold{}, cover: make([]int, simBlocks), slotCover: make([]int, simSlots)}
		s.newHolder(rk)
		if cfg.rules == pinRules {
			rk.mono = s.newMono()
		}
		if p.staging {
			if err := p.slots.join(&staging.Config{Mode: staging.ModeOn, Slots: simSlots, SlotBytes: simSlotBytes}, p.afterAll); err != nil {
				panic(err)
			}
		}
		p.ranks = append(p.ranks, rk)
	}
	for i := range s.d {
		s.d[i] = s.newDecode(i, 1+r.IntN(2))
	}
	// The faults the chaos event injects (one event every 32 ms on average;
	// with every attack on, a clock step about every 110 ms, a crash about
	// every 0.8 s): 0 clock step, 1 crash, 2 prefill abort, 3 decode abort,
	// 4 a completion sent earlier arrives again, 5 a foreign completion,
	// 6 a decode rank pauses, -1 nothing.
	if cfg.attacks&(atkClockAfterHS|atkClockDuringRead) != 0 {
		s.addChaos(0, 1.5)
		switch cfg.attacks & (atkClockAfterHS | atkClockDuringRead) {
		case atkClockAfterHS:
			s.clockGate = 1
		case atkClockDuringRead:
			s.clockGate = 2
		}
	}
	if cfg.attacks&atkCrash != 0 {
		s.addChaos(1, 0.2)
	}
	if s.prefillAborts {
		s.addChaos(2, 1)
	}
	if s.decodeAborts {
		s.addChaos(3, 1)
	}
	if cfg.attacks&atkStaleCompletion != 0 {
		s.addChaos(4, 0.6)
	}
	if cfg.attacks&atkForeignCompletion != 0 {
		s.addChaos(5, 0.6)
	}
	if cfg.attacks&atkPinNet != 0 {
		s.addChaos(6, 0.15)
	}
	for range 5 - len(s.chaosKinds) {
		s.addChaos(-1, 1) // nothing
	}
	s.trace("start", fmt.Sprintf("tp %d->%d,%d", tp, s.d[0].tp, s.d[1].tp), boolInt(p.staging), boolInt(p.afterAll), cfg.rules.String())
	s.schedule(0, simEvent{kind: evGen})
	s.schedule(s.between(0, 20*time.Millisecond), simEvent{kind: evChaos})
	return s
}

func (s *sim) addChaos(kind int, w float64) {
	s.chaosKinds, s.chaosWeights = append(s.chaosKinds, kind), append(s.chaosWeights, w)
}

// chaosPick draws a fault kind by weight.
func (s *sim) chaosPick() int {
	total := 0.0
	for _, w := range s.chaosWeights {
		total += w
	}
	u := s.rng.Float64() * total
	for i, w := range s.chaosWeights {
		if u < w {
			return s.chaosKinds[i]
		}
		u -= w
	}
	return -1
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// newHolder gives rank rk a fresh production core, as NewProducer makes
// it: gonixl's protocol, whose decodes name the hold they read, and under
// the legacy rules the hold queries of that revision.
func (s *sim) newHolder(rk *simRank) {
	h, err := newHolds(s.p.tp, simLease, 1024)
	if err != nil {
		panic(err)
	}
	h.keyed = s.cfg.rules == pinRules
	rk.h = h
	rk.hold = &holder{h: h, rank: rk.r, lease: simLease, extension: simHBExtension, out: rk, legacyQueries: s.cfg.rules == legacyRules}
}

func (s *sim) violate(what, format string, args ...any) { s.violateID("", what, format, args...) }

// violateID records the first violation, about request id.
func (s *sim) violateID(id, what, format string, args ...any) {
	if s.viol != nil {
		return
	}
	detail := fmt.Sprintf(format, args...)
	s.trace("VIOLATION", what, 0, 0, id)
	s.viol = &simViolation{what: what, detail: detail, id: id, seed: s.seed, step: s.step, t: s.t, trace: s.lastTrace()}
}

// run processes events until steps have run, an invariant broke or
// nothing is left to do.
func (s *sim) run(steps int) {
	for s.step < steps && s.viol == nil && len(s.q) > 0 {
		s.stepOnce()
	}
}

// finish stops new work, lets every load end (each has a deadline), then
// closes the prefill ranks and checks that everything was released once.
func (s *sim) finish() {
	if s.viol != nil {
		return
	}
	s.draining = true
	limit := s.t + 30*time.Second
	for s.viol == nil && len(s.q) > 0 && (s.liveLoads > 0 || s.pendingFinish > 0 || s.pendingParams > 0) {
		if s.t > limit {
			s.violate("liveness", "%d loads, %d RequestFinished calls and %d Params deliveries still pending 30 s (true time) after the work stopped", s.liveLoads, s.pendingFinish, s.pendingParams)
			return
		}
		s.stepOnce()
	}
	if s.viol != nil {
		return
	}
	if s.liveLoads != 0 {
		s.violate("liveness", "%d loads never ended", s.liveLoads)
		return
	}
	for _, rk := range s.p.ranks {
		if !rk.up {
			continue
		}
		rk.hold.releaseAll() // Close: the ranks' edges report them
	}
	for _, rk := range s.p.ranks {
		if rk.nheld != 0 || rk.h.len() != 0 {
			s.violate("release", "rank %d still holds %d requests (model %d) after Close", rk.r, rk.h.len(), rk.nheld)
		}
	}
	if s.finishedHolds != s.releasedHolds {
		s.violate("release", "%d holds made, %d released", s.finishedHolds, s.releasedHolds)
	}
	if len(s.p.reqs) != 0 || len(s.p.free) != simBlocks {
		s.violate("release", "the engine still owns %d requests, %d of %d blocks free", len(s.p.reqs), len(s.p.free), simBlocks)
	}
	s.stats.simTime = s.t
}

func (s *sim) sortedIDs(ids []string) []string {
	slices.Sort(ids) // releaseAll iterates a map
	return ids
}

func (s *sim) stepOnce() {
	e := s.q.pop()
	s.t = e.at
	s.step++
	s.stats.steps++
	switch e.kind {
	case evGen:
		s.gen()
	case evFinish:
		s.pendingFinish--
		s.finishOnRank(e.req, e.a)
	case evParams:
		s.pendingParams--
		s.deliver(e.del)
	case evMsg:
		if m := e.msg; (m.kind == mPinReply || m.kind == mQueryReply) && s.deferred(s.d[m.eng].ranks[m.rank], e) {
			break
		}
		s.handle(e.msg)
	case evRead:
		s.readDone(e.xfer)
	case evTimeout:
		if dr := s.d[e.a].ranks[e.b]; !s.deferred(dr, e) {
			s.callTimeout(dr, e.x)
		}
	case evDTick:
		if dr := s.d[e.a].ranks[e.b]; !s.deferred(dr, e) {
			s.dtick(dr)
		}
	case evPTick:
		s.ptick(s.p.ranks[e.a])
	case evChaos:
		s.chaos()
	case evRestart:
		s.restart(s.p.ranks[e.a])
	case evDrop:
		s.p.adverts.drop(e.msg.ids)
	}
	s.check()
}

// check is the per-step invariant check; the event handlers check the
// rest as things happen (incremental bookkeeping, no scans).
func (s *sim) check() {
	for _, rk := range s.p.ranks {
		// A hold whose lease ran out while pinned is overdue: held, with no
		// lease, until its pin ends.
		if n := rk.h.len(); n != rk.nheld || rk.h.leases.Len()+len(rk.h.overdue) != n {
			s.violate("release", "rank %d: holds has %d requests, %d leases and %d overdue, the model %d live holds (a hold vanished or was kept without being reported)",
				rk.r, n, rk.h.leases.Len(), len(rk.h.overdue), rk.nheld)
		}
	}
	if s.liveLoads < 0 || s.readsInFlight < 0 {
		s.violate("model", "live loads %d, READs in flight %d", s.liveLoads, s.readsInFlight)
	}
}

// ---- prefill ----

// gen starts a request: blocks from the free list, its KV written on every
// rank (the forward pass), then RequestFinished on each rank, possibly at
// different moments.
func (s *sim) gen() {
	if s.draining {
		return
	}
	s.schedule(s.between(500*time.Microsecond, 8*time.Millisecond), simEvent{kind: evGen})
	p := s.p
	k := 1 + s.rng.IntN(3)
	if p.down > 0 || len(p.reqs) >= simMaxReqs || len(p.free) < k {
		return
	}
	cid, retry := 0, false
	if s.cfg.attacks&atkRetryID != 0 && len(s.retryRing) > 0 && s.chance(0.3) {
		id := s.lastFreed
		if s.chance(0.5) {
			id = s.retryRing[s.rng.IntN(len(s.retryRing))]
		}
		if p.byID[id] == nil {
			cid, _ = strconv.Atoi(id[1:])
			retry = true
			s.stats.retries++
		}
	}
	if cid == 0 {
		s.nextCid++
		cid = s.nextCid
	}
	q := &simReq{id: simID(cid), cid: cid, retry: retry, failRank: -1, lost: make([]bool, p.tp), ranDone: make([]bool, p.tp)}
	for range k {
		i := len(p.free) - 1 // the most recently freed block
		if !p.lifo {
			i = s.rng.IntN(len(p.free))
		}
		q.blocks = append(q.blocks, p.free[i])
		p.free[i] = p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
	}
	for _, rk := range p.ranks {
		for _, b := range q.blocks {
			s.writeBlock(rk, b, simTag(cid, rk.r), q.id)
		}
	}
	q.stage = p.staging && s.chance(0.7)
	if q.stage && p.tp > 1 && s.cfg.attacks&atkStagingFail != 0 && s.chance(0.3) {
		q.failRank = s.rng.IntN(p.tp)
		q.refinish = s.chance(0.5)
	}
	p.reqs = append(p.reqs, q)
	p.byID[q.id] = q
	s.stats.requests++
	q.pending = p.tp
	s.trace("forward", "", len(q.blocks), q.blocks[0], q.id)
	for _, rk := range p.ranks {
		lag := time.Duration(0)
		if s.rankLag && s.chance(0.5) {
			lag = s.between(0, 3*time.Millisecond)
			if s.chance(0.02) {
				lag = s.between(0, 100*time.Millisecond) // a slow rank
			}
		}
		s.pendingFinish++
		s.schedule(lag, simEvent{kind: evFinish, req: q, a: rk.r})
	}
}

// writeBlock is the engine writing block b of rank rk: never while a hold
// covers it (invariant 4).
func (s *sim) writeBlock(rk *simRank, b int, tag uint64, id string) {
	if rk.cover[b] > 0 {
		s.violateID(s.coverOwner(rk, b, -1), "block reused while held", "rank %d block %d is rewritten (for %s) while %d live holds cover it", rk.r, b, id, rk.cover[b])
	}
	rk.blocks[b] = tag
}

// finishOnRank is Producer.RequestFinished on one rank: the gather into a
// staging slot first (a failed gather holds nothing), then the production
// core's holder.finish (holds.finish, the engine's advert, the Params'
// deadline, nonce and key).
func (s *sim) finishOnRank(q *simReq, r int) {
	p := s.p
	rk := p.ranks[r]
	q.pending--
	q.ranDone[r] = true
	if !rk.up || q.lost[r] {
		s.trace("finish-lost", "", r, 0, q.id)
		s.maybeHandOut(q)
		s.settle(q)
		return
	}
	id := q.id
	slot := -1
	if p.staging {
		i, staged := p.slots.decide(id, p.tp, q.stage)
		if staged && q.failRank == r {
			p.slots.release(i) // the gather failed: connector.ErrStaging, nothing held
			s.trace("gather-failed", "", r, i, id)
			if !q.refinish {
				s.maybeHandOut(q)
				s.settle(q)
				return
			}
			// The engine calls RequestFinished on that rank again at once,
			// before it hands any Params on: it decides its slot anew.
			i, staged = p.slots.decide(id, p.tp, q.stage)
		}
		if staged {
			if rk.slotCover[i] > 0 {
				s.violateID(s.coverOwner(rk, -1, i), "block reused while held", "rank %d staging slot %d is gathered into (for %s) while %d live holds of %s cover it", r, i, id, rk.slotCover[i], s.coverOwner(rk, -1, i))
			}
			// The gather copies the blocks' image: one tag if every block
			// holds the same request's bytes, else a mixture no request has.
			tag := rk.blocks[q.blocks[0]]
			for _, b := range q.blocks[1:] {
				if rk.blocks[b] != tag {
					tag = s.junkTag()
				}
			}
			rk.slotMem[i] = tag
			slot = i
		}
	}
	now := s.now(&rk.clock)
	base := Params{TransferParams: connector.TransferParams{DoRemotePrefill: true, RemoteBlockIDs: slices.Clone(q.blocks), RemoteEngineID: "prefill", RemoteRequestID: id, RemoteHost: "127.0.0.1", RemotePort: 5600, TPSize: p.tp}, PPSize: 1, TransferMode: handshake.ModePull}
	if slot >= 0 {
		v := slot
		base.RemoteStagingSlot = &v
	}
	params, err := rk.hold.finish(id, q.blocks, now, s.mono(&rk.mono), base)
	if err != nil {
		s.violate("model", "rank %d: finish %s: %v", r, id, err)
		return
	}
	key, adv := params.holdKey(), rk.adv
	rk.held[id] = &simHold{req: q, key: key, adv: adv, slot: slot}
	rk.nheld++
	for _, b := range q.blocks {
		rk.cover[b]++
	}
	if slot >= 0 {
		rk.slotCover[slot]++
	}
	q.live++
	s.finishedHolds++
	s.stats.holds++
	s.trace("finish", "", r, slot, id)
	if q.params == nil {
		q.params = &params
	}
	s.maybeHandOut(q)
	s.ensurePTick(rk)
	s.settle(q)
}

// advert is the rank's holdEdges.advert: the engine's real advert table,
// whose new adverts draw their nonce from the seed's stream (the real one
// from math/rand; the legacy glue has none).
func (rk *simRank) advert(id string, rank int, now, own time.Time) advert {
	p := rk.s.p
	a := p.adverts.take(id, rank, p.tp, now, own, func(own time.Time) advert {
		a := advert{deadline: own}
		if p.rng != nil {
			a.nonce = p.rng.Uint64()>>11 | 1 // below 2^53, as the real one
		}
		return a
	})
	rk.adv = a.deadline
	return a
}

// released is the rank's holdEdges.released: DrainFreed (sim.release).
func (rk *simRank) released(ids []string, how holdEnd) {
	why := relClose
	switch how {
	case endCompletion:
		why = relCompletion
	case endExpiry:
		why = relExpire
	}
	rk.s.release(rk, rk.s.sortedIDs(ids), why) // the holder's ids come out of a map
}

// droppedAdverts is a rank's call of Engine.dropAdverts for the holds it
// released (pin rules; the legacy glue has none). The real code takes the
// engine's lock for it only after the rank's holds released them, so
// another rank's RequestFinished may advertise in between: sometimes it
// runs a little later.
func (s *sim) droppedAdverts(ids []string) {
	if s.cfg.rules != pinRules || len(ids) == 0 {
		return
	}
	if s.chance(0.2) {
		s.schedule(s.between(0, 200*time.Microsecond), simEvent{kind: evDrop, msg: &simMsg{ids: slices.Clone(ids)}})
		return
	}
	s.p.adverts.drop(ids)
}

// settle lets the engine free a request's blocks once no rank holds it or
// will hold it.
func (s *sim) settle(q *simReq) {
	if q.freed || q.live > 0 || q.pending > 0 {
		return
	}
	q.freed = true
	p := s.p
	i := slices.Index(p.reqs, q)
	p.reqs = slices.Delete(p.reqs, i, i+1)
	delete(p.byID, q.id)
	p.free = append(p.free, q.blocks...)
	if s.chance(s.reuseNow) {
		// Another request takes the blocks at once.
		tag := s.junkTag()
		for _, rk := range p.ranks {
			for _, b := range q.blocks {
				s.writeBlock(rk, b, tag|uint64(rk.r), q.id+"'s successor")
			}
		}
	}
	s.lastFreed = q.id
	if len(s.retryRing) < simRetryRing {
		s.retryRing = append(s.retryRing, q.id)
	} else {
		s.retryRing[s.rng.IntN(simRetryRing)] = q.id
	}
	s.trace("engine-free", "", len(q.blocks), q.blocks[0], q.id)
}

// coverOwner names a live hold on rk covering block b or slot i (a scan,
// only for a report).
func (s *sim) coverOwner(rk *simRank, b, i int) string {
	var ids []string
	for id, hd := range rk.held {
		if i >= 0 && hd.slot == i || b >= 0 && slices.Contains(hd.req.blocks, b) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// junkTag is the tag of bytes no request has: another request's, in blocks
// the engine reused, a crash's garbage, or a mixture.
func (s *sim) junkTag() uint64 {
	s.nextJunk++
	return simTag(s.nextJunk, 0)
}

// release is a rank reporting holds released (DrainFreed): each exactly
// once, and by expiry never before the deadline the rank advertised (its
// wall clock) nor before a pin it granted ended (its monotonic clock). The
// rank then drops the ids' adverts (pin rules).
func (s *sim) release(rk *simRank, ids []string, how simRelease) {
	for _, id := range ids {
		hd := rk.held[id]
		if hd == nil {
			s.violateID(id, "release", "rank %d released %s by %s, which it did not hold (a second release)", rk.r, id, simReleaseNames[how])
			continue
		}
		if how == relExpire {
			if now := s.now(&rk.clock); now.Before(hd.adv) {
				s.violateID(id, "release", "rank %d expired %s at %v, before the deadline it advertised, %v", rk.r, id, now, hd.adv)
			}
			if mono := s.mono(&rk.mono); mono.Before(hd.pinUntil) {
				s.violateID(id, "released while pinned", "rank %d expired %s at %v on its monotonic clock, before the pin it granted ended, %v", rk.r, id, mono, hd.pinUntil)
			}
		}
		delete(rk.held, id)
		rk.nheld--
		for _, b := range hd.req.blocks {
			rk.cover[b]--
		}
		if hd.slot >= 0 {
			rk.slotCover[hd.slot]--
			s.p.slots.release(hd.slot) // Producer.releasedSlots
		}
		s.releasedHolds++
		s.stats.released[how]++
		s.trace("release", simReleaseNames[how], rk.r, 0, id)
		hd.req.live--
		s.settle(hd.req)
	}
	s.droppedAdverts(ids)
}

// maybeHandOut hands the Params of the first rank that finished on: at
// once, or, with ParamsAfterAllRanks, once every rank's RequestFinished
// returned — also when one of them failed (the staging attack: the engine
// hands the others' Params on anyway).
func (s *sim) maybeHandOut(q *simReq) {
	if !q.handed && q.params != nil && (!s.p.afterAll || q.pending == 0) {
		s.handOut(q)
	}
}

// handOut sends a request's Params to decode engine A through the proxy,
// and under attack also replays them to B, hands them to A again later,
// or forges a copy.
func (s *sim) handOut(q *simReq) {
	if q.handed {
		return
	}
	q.handed = true
	d := s.between(100*time.Microsecond, 5*time.Millisecond)
	if s.chance(s.proxySlowShare) {
		d = s.between(0, 3*simLease/2)
	}
	eng := 0
	if q.retry && s.chance(0.5) {
		eng = 1
	}
	s.sendParams(d, &simDelivery{p: q.params, truth: q.cid, eng: eng, kind: "genuine"})
	if s.cfg.attacks&atkReplay != 0 && s.chance(0.5) {
		s.stats.replayed++
		s.sendParams(s.between(0, 2*simLease), &simDelivery{p: q.params, truth: q.cid, eng: 1, kind: "replay"})
	}
	if s.cfg.attacks&atkRedeliver != 0 && s.chance(0.3) {
		s.stats.redelivered++
		s.sendParams(s.between(0, 3*simLease), &simDelivery{p: q.params, truth: q.cid, eng: 0, kind: "redelivered"})
	}
	if s.cfg.attacks&atkForge != 0 && s.chance(0.3) {
		s.stats.forged++
		f := *q.params
		how := ""
		switch s.rng.IntN(6) {
		case 0:
			how = "id-unknown"
			f.RemoteRequestID = simID(s.junkCid())
		case 1:
			how = "id-other"
			f.RemoteRequestID = simID(s.junkCid())
			if n := len(s.p.reqs); n > 1 {
				if o := s.p.reqs[s.rng.IntN(n)]; o != q {
					f.RemoteRequestID = o.id
				}
			}
		case 2:
			how = "blocks"
			f.RemoteBlockIDs = slices.Clone(f.RemoteBlockIDs)
			i := s.rng.IntN(len(f.RemoteBlockIDs))
			f.RemoteBlockIDs[i] = (f.RemoteBlockIDs[i] + 1 + s.rng.IntN(simBlocks-1)) % simBlocks
		case 3:
			how = "slot"
			switch {
			case f.RemoteStagingSlot == nil:
				v := s.rng.IntN(simSlots)
				f.RemoteStagingSlot = &v
			case s.chance(0.5):
				f.RemoteStagingSlot = nil
			default:
				v := (*f.RemoteStagingSlot + 1 + s.rng.IntN(simSlots-1)) % simSlots
				f.RemoteStagingSlot = &v
			}
		case 4:
			how = "deadline"
			f.RemoteBlocksExpiryTime += float64(1 + s.rng.IntN(10))
		case 5:
			how = "nonce"
			f.RemoteHoldNonce ^= s.rng.Uint64()>>11 | 1 // below 2^53: Load refuses others
		}
		truth, _ := strconv.Atoi(f.RemoteRequestID[1:])
		s.sendParams(s.between(0, simLease), &simDelivery{p: &f, truth: truth, eng: s.rng.IntN(2), kind: "forged-" + how})
	}
}

func (s *sim) junkCid() int {
	s.nextJunk++
	return s.nextJunk
}

func (s *sim) sendParams(d time.Duration, del *simDelivery) {
	s.pendingParams++
	s.schedule(d, simEvent{kind: evParams, del: del})
}

func (s *sim) ensurePTick(rk *simRank) {
	if !rk.ticking {
		rk.ticking = true
		s.schedule(s.between(500*time.Microsecond, 3*time.Millisecond), simEvent{kind: evPTick, a: rk.r})
	}
}

// ptick is the Producer's poller tick: holds whose leases ran out (the
// rank's wall clock) and whose pins ended (its monotonic clock) are
// released.
func (s *sim) ptick(rk *simRank) {
	rk.ticking = false
	if !rk.up {
		return
	}
	now, mono := s.now(&rk.clock), s.mono(&rk.mono)
	rk.hold.tick(now, mono) // the rank's edges report what it released
	if d, ok := rk.h.leases.Next(); ok && !d.After(now) {
		s.violate("release", "rank %d: a lease ending at %v is still held at %v after expire", rk.r, d, now)
	}
	if rk.h.len() > 0 {
		s.ensurePTick(rk)
	}
}

// handle delivers a message.
func (s *sim) handle(m *simMsg) {
	s.trace("recv", simMsgNames[m.kind], m.eng, m.rank, m.id)
	switch m.kind {
	case mHello:
		s.onHello(m)
	case mQuery:
		s.onQuery(m)
	case mPin:
		s.onPin(m)
	case mCompletion:
		s.onCompletion(m)
	case mHeartbeat:
		if rk := s.p.ranks[m.prank]; rk.up {
			msg, err := notif.EncodeHeartbeat(m.ids) // as decode sent it
			if err == nil {
				err = rk.hold.heartbeat(msg, s.now(&rk.clock))
			}
			if err != nil {
				s.violate("model", "heartbeat %v: %v", m.ids, err)
			}
		}
	case mHelloReply:
		s.onHelloReply(m)
	case mQueryReply:
		s.onQueryReply(m)
	case mPinReply:
		s.onVerdict(m)
	}
}

// onHello is the side channel's handshake: the payload with the ranks'
// agent metadata (incarnations) and the engine's clock, or "retry" while a
// rank is restarting.
func (s *sim) onHello(m *simMsg) {
	p := s.p
	r := &simMsg{kind: mHelloReply, call: m.call, eng: m.eng, rank: m.rank, sent: m.sent, now: s.now(&p.ranks[0].clock).UnixNano()}
	if p.down > 0 {
		r.retry = true
	} else {
		for _, rk := range p.ranks {
			r.inc = append(r.inc, rk.inc)
		}
	}
	s.send(r)
}

// onQuery is Engine.extend: the real extendRanks over the ranks, each
// the production core's holder.extend (the legacy rules: its
// legacyQueries switch, which binds nothing).
func (s *sim) onQuery(m *simMsg) {
	remoteNow := s.now(&s.p.ranks[0].clock).UnixNano()
	out := extendRanks(s.upRanks(), s.d[m.eng].name, m.agent, m.ids)
	s.send(&simMsg{kind: mQueryReply, call: m.call, eng: m.eng, rank: m.rank, ids: m.ids, holds: out, now: remoteNow, sent: m.sent})
}

// upRanks is the ranks the engine's side channel sees: nil unless every
// rank is up (pullEngine.ranks).
func (s *sim) upRanks() []*simRank {
	if s.p.down > 0 {
		return nil
	}
	return s.p.ranks
}

// extendHolds is Producer.extendHolds on the rank's wall clock.
func (rk *simRank) extendHolds(reader, agent string, ids []string) []time.Time {
	return rk.hold.extend(reader, agent, ids, rk.s.now(&rk.clock))
}

// simPinned is what one rank's answer to one hold of a pin did, for the
// model's ledger: the hold it pinned (nil: none) until when.
type simPinned struct {
	hd    *simHold
	until time.Time
}

// onPin is Engine.confirm: the real confirmRanks over the ranks, each the
// production core's holder.pin on the rank's monotonic clock. The reply
// carries, per hold and rank named, what was pinned until when (the
// model's ledger, which the decode side's invariants check against).
func (s *sim) onPin(m *simMsg) {
	r := &simMsg{kind: mPinReply, call: m.call, eng: m.eng, rank: m.rank, now: s.now(&s.p.ranks[0].clock).UnixNano(), sent: m.sent, id: m.id}
	s.pinLog = s.pinLog[:0]
	ranks := s.upRanks()
	r.whys = confirmRanks("prefill", ranks, s.d[m.eng].name, m.agent, m.refs)
	k := 0
	for _, ref := range m.refs {
		pinned := make([]*simHold, len(ref.Ranks))
		until := make([]time.Time, len(ref.Ranks))
		if ranks != nil {
			for i := range ref.Ranks {
				pinned[i], until[i] = s.pinLog[k].hd, s.pinLog[k].until
				k++
			}
		}
		r.pinned, r.until = append(r.pinned, pinned), append(r.until, until)
	}
	s.sendPinMsg(r)
}

// pinHold is Producer.pinHold on the rank's monotonic clock, noting in the
// model's ledger what it pinned.
func (rk *simRank) pinHold(reader, agent string, ref handshake.HoldRef) string {
	s := rk.s
	mono := s.mono(&rk.mono)
	v, _ := rk.hold.pin(reader, agent, ref, mono)
	pin := simPinned{}
	if v == "" {
		hd := rk.held[ref.ID]
		u := mono.Add(time.Duration(ref.PinMicros) * time.Microsecond)
		if hd == nil || hd.key != ref.Key {
			s.violateID(ref.ID, "model", "rank %d pinned %s for key %x, which the model does not hold with that key", rk.r, ref.ID, ref.Key)
		} else {
			if u.After(hd.pinUntil) {
				hd.pinUntil = u
			}
			pin = simPinned{hd, u}
		}
		s.trace("pinned", reader, rk.r, 0, ref.ID)
		s.ensurePTick(rk) // Producer.pinHold wakes the poller
	}
	s.pinLog = append(s.pinLog, pin)
	return v
}

// onCompletion is Producer.onCompletion: a NIXL "<id>:<n>" or
// "<id>:<n>#<hold key>" into the production core's holder.completion. A
// pinned hold is released only by completions naming its key (2c).
func (s *sim) onCompletion(m *simMsg) {
	rk := s.p.ranks[m.prank]
	if !rk.up {
		return
	}
	hd := rk.held[m.id]
	msg, err := notif.EncodeSeqCompletion(m.id, m.n, m.seq) // as decode sends it
	if err != nil {
		s.violate("model", "completion %q: %v", m.id, err)
		return
	}
	_, out, _ := rk.hold.completion(m.agent, msg) // the rank's edges report a release
	s.stats.outcomes[out]++
	if out == completionDone {
		if hd != nil && !hd.pinUntil.IsZero() && m.seq != hd.key {
			s.violateID(m.id, "release", "rank %d: a completion from %s naming key %x released %s, pinned with key %x", rk.r, m.agent, m.seq, m.id, hd.key)
		}
		if s.cfg.rules == pinRules && m.seq == 0 {
			s.violateID(m.id, "release", "rank %d: a plain completion from %s released %s", rk.r, m.agent, m.id)
		}
	}
}

// ---- faults ----

func (s *sim) chaos() {
	if s.draining {
		return
	}
	s.schedule(s.between(5*time.Millisecond, 60*time.Millisecond), simEvent{kind: evChaos})
	switch s.chaosPick() {
	case 0:
		s.clockStep()
	case 1:
		s.crash()
	case 2:
		if n := len(s.p.reqs); n > 0 {
			q := s.p.reqs[s.rng.IntN(n)]
			for _, rk := range s.p.ranks {
				rk.hold.abort(q.id) // Producer.Abort: no more extensions
			}
			s.trace("prefill-abort", "", 0, 0, q.id)
		}
	case 3:
		e := s.d[s.rng.IntN(2)]
		dr := e.ranks[s.rng.IntN(len(e.ranks))]
		if n := len(dr.live); n > 0 {
			s.abortLoad(dr, dr.live[s.rng.IntN(n)])
		}
	case 4:
		s.replayCompletion()
	case 5:
		s.foreignCompletion()
	case 6:
		e := s.d[s.rng.IntN(2)]
		if dr := e.ranks[s.rng.IntN(len(e.ranks))]; !s.paused(dr) {
			dr.pausedUntil = s.t + s.between(simTransferTimeout/4, 2*simTransferTimeout)
			s.stats.pauses++
			s.trace("decode-pause", e.name, int((dr.pausedUntil-s.t)/time.Millisecond), dr.j, "")
		}
	}
}

// paused reports whether decode rank dr is paused now.
func (s *sim) paused(dr *simDRank) bool { return s.t < dr.pausedUntil }

// deferred puts off until the end of dr's pause an event dr is to handle,
// and reports whether it did.
func (s *sim) deferred(dr *simDRank, e simEvent) bool {
	if !s.paused(dr) {
		return false
	}
	s.schedule(dr.pausedUntil-s.t, e)
	return true
}

// sendPinMsg sends a pin or its verdict; under atkPinNet it may be lost
// or delayed past the READs' end and past the call's timeout.
func (s *sim) sendPinMsg(m *simMsg) {
	if s.cfg.attacks&atkPinNet != 0 {
		switch u := s.rng.Float64(); {
		case u < 0.04:
			s.stats.pinsLost++
			s.trace("pin-lost", simMsgNames[m.kind], m.eng, m.rank, m.id)
			return
		case u < 0.2:
			s.sendAfter(m, s.between(0, simPinTimeout*3/2))
			return
		}
	}
	s.send(m)
}

// noteCompletion keeps a completion decode sent, for atkStaleCompletion.
func (s *sim) noteCompletion(m *simMsg) {
	if s.cfg.attacks&atkStaleCompletion == 0 {
		return
	}
	if len(s.compRing) < simCompRing {
		s.compRing = append(s.compRing, m)
		return
	}
	s.compRing[s.compNext] = m
	s.compNext = (s.compNext + 1) % simCompRing
}

// replayCompletion delivers again a completion decode sent earlier: by
// preference one naming an earlier hold of an id that its rank now holds
// (pinned, if one is), as a late or duplicated NIXL notification would.
func (s *sim) replayCompletion() {
	if len(s.compRing) == 0 {
		return
	}
	var pick *simMsg
	best := 0
	for _, m := range s.compRing {
		score := 0
		if rk := s.p.ranks[m.prank]; rk.up {
			if hd := rk.held[m.id]; hd != nil && hd.key != m.seq {
				score = 1
				if !hd.pinUntil.IsZero() {
					score = 2
				}
			}
		}
		if score > best {
			pick, best = m, score
		}
	}
	if pick == nil || s.chance(0.2) {
		pick = s.compRing[s.rng.IntN(len(s.compRing))]
	}
	s.stats.staleSent++
	s.trace("replay-completion", strconv.Itoa(best), pick.prank, 0, pick.id)
	s.send(pick)
}

// foreignCompletion sends a completion for an id some prefill rank holds
// from an agent of another decode engine than the one that reads the hold:
// while the hold is bound, an agent of the other engine here, or of a
// third decode that never pins (a vLLM decode, or one that saw the Params
// and misbehaves); while it is not, an agent of that third decode only.
// The agent is the NIXL sender's name, which a peer cannot choose: a
// completion from the reading engine's own agents is one it sent (a late
// or repeated one is atkStaleCompletion's). It names the hold's key (the
// sender saw the Params), none (vLLM's), or a wrong one; under the legacy
// rules none, as every decode then sent.
func (s *sim) foreignCompletion() {
	rk := s.p.ranks[s.rng.IntN(len(s.p.ranks))]
	var ids []string
	for _, q := range s.p.reqs {
		if rk.held[q.id] != nil {
			ids = append(ids, q.id)
		}
	}
	if !rk.up || len(ids) == 0 {
		return
	}
	id := ids[s.rng.IntN(len(ids))]
	hd := rk.held[id]
	agents := []string{"vllm-c/0", "vllm-c/1"}
	if reader := rk.h.reqs[id].reader; reader != "" {
		for _, e := range s.d {
			if e.name != reader {
				for _, dr := range e.ranks {
					agents = append(agents, dr.agent)
				}
			}
		}
	}
	m := &simMsg{kind: mCompletion, prank: rk.r, agent: agents[s.rng.IntN(len(agents))], id: id, n: 1 + s.rng.IntN(2), eng: -1}
	if s.cfg.rules == pinRules {
		switch u := s.rng.Float64(); {
		case u < 0.5:
			m.seq = hd.key
		case u < 0.9:
		default:
			m.seq = s.rng.Uint64() | 1
		}
	}
	s.stats.foreignSent++
	s.trace("foreign-completion", m.agent, rk.r, 0, id)
	s.send(m)
}

// clockStep steps one decode engine's clock, one prefill rank's or all of
// them, either way, by up to 3 s (beyond the lease).
func (s *sim) clockStep() {
	switch s.clockGate {
	case 1:
		if s.readsInFlight > 0 {
			return
		}
	case 2:
		if s.readsInFlight == 0 {
			return
		}
	}
	d := s.between(time.Millisecond, 3*time.Second)
	if s.chance(0.5) {
		d = -d
	}
	switch u := s.rng.IntN(4); {
	case u < 2:
		e := s.d[u]
		e.clock.off += d
		s.trace("clock-step", e.name, int(d/time.Millisecond), 0, "")
	case u == 2:
		rk := s.p.ranks[s.rng.IntN(len(s.p.ranks))]
		rk.clock.off += d
		s.trace("clock-step", "prefill-rank", int(d/time.Millisecond), rk.r, "")
	default:
		for _, rk := range s.p.ranks {
			rk.clock.off += d
		}
		s.trace("clock-step", "prefill", int(d/time.Millisecond), 0, "")
	}
}

// crash stops a prefill rank (Producer.Close: its holds are released, its
// agent and memory are gone) and restarts it later with a fresh holds.
func (s *sim) crash() {
	p := s.p
	if p.down > 0 {
		return
	}
	rk := p.ranks[s.rng.IntN(len(p.ranks))]
	s.stats.crashes++
	s.trace("crash", "", rk.r, rk.h.len(), "")
	rk.hold.releaseAll() // Producer.Close: the rank's edges report them
	rk.up = false
	p.down++
	if p.staging {
		p.slots.leave()
	}
	for _, q := range p.reqs {
		if q.pending > 0 {
			q.lost[rk.r] = true
		}
	}
	for b := range rk.blocks {
		s.writeBlock(rk, b, s.junkTag()|uint64(rk.r), "crash")
	}
	for i := range rk.slotMem {
		if rk.slotCover[i] > 0 {
			s.violate("block reused while held", "rank %d staging slot %d lost in a crash while held", rk.r, i)
		}
		rk.slotMem[i] = s.junkTag()
	}
	s.schedule(s.between(time.Millisecond, 200*time.Millisecond), simEvent{kind: evRestart, a: rk.r})
}

func (s *sim) restart(rk *simRank) {
	s.newHolder(rk)
	if s.cfg.rules == pinRules {
		rk.mono = s.newMono() // a new process
	}
	rk.up = true
	rk.inc++
	s.p.down--
	if s.p.staging {
		if err := s.p.slots.join(&staging.Config{Mode: staging.ModeOn, Slots: simSlots, SlotBytes: simSlotBytes}, s.p.afterAll); err != nil {
			panic(err)
		}
	}
	s.trace("restart", "", rk.r, rk.inc, "")
}

// ---- decode (simdecode_test.go) ----

// readTime draws how long a READ takes.
func (s *sim) readTime() time.Duration {
	switch u := s.rng.Float64(); {
	case s.cfg.attacks&atkPinNet != 0 && u < cmp.Or(s.cfg.stall, 0.01):
		// Stalled past the TransferTimeout a pin covers.
		s.stats.stalled++
		return s.between(simTransferTimeout*3/4, 2*simTransferTimeout)
	case u < 0.02:
		return s.between(50*time.Millisecond, 1500*time.Millisecond)
	case u < 0.2:
		return s.between(2*time.Millisecond, 50*time.Millisecond)
	default:
		return s.between(50*time.Microsecond, 2*time.Millisecond)
	}
}

// ---- running ----

// simRun runs one seed for steps steps plus the drain at the end.
func simRun(seed uint64, cfg simConfig, steps int) *sim {
	s := newSim(seed, cfg)
	s.run(steps)
	s.finish()
	return s
}

// simMode is the configuration the environment asks for: short by
// default (4 seeds x 20,000 steps, a fraction of a second), GONIXL_SIM=long
// for the long one (300 seeds x 1,000,000 steps, every invariant checked
// at every step: about 2 minutes on one core), GONIXL_SIM_SEED=<n> for
// one seed (at the length the mode gives).
func simMode(t *testing.T) (seeds []uint64, steps int, long bool) {
	long = os.Getenv("GONIXL_SIM") == "long"
	steps = 20_000
	n := 4
	if long {
		steps, n = 1_000_000, 300
	}
	if v := os.Getenv("GONIXL_SIM_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("GONIXL_SIM_SEED=%q: %v", v, err)
		}
		return []uint64{seed}, steps, long
	}
	for i := range n {
		seeds = append(seeds, uint64(i+1))
	}
	return seeds, steps, long
}

// TestSimPinRules runs this revision's rules through every attack and
// fault at once: no invariant may break. Every seed runs (a seed stops at
// its first violation) and the first violation of each kind is reported
// with its replayed history. It also checks that the attacks really
// happened and were refused (loads answered "not held", completions not
// counted), so that a simulation that stopped attacking would fail here.
func TestSimPinRules(t *testing.T) {
	seeds, steps, long := simMode(t)
	cfg := simConfig{rules: pinRules, attacks: atkAll}
	var total simStats
	var first []*simViolation
	kinds := map[string]int{}
	bad := 0
	start := time.Now()
	for _, seed := range seeds {
		s := simRun(seed, cfg, steps)
		total.add(s.stats)
		if v := s.viol; v != nil {
			bad++
			if kinds[v.what]++; kinds[v.what] == 1 {
				first = append(first, v)
			}
			t.Logf("seed %d: VIOLATION at step %d: %s", seed, v.step, v.what)
		} else if long {
			t.Logf("seed %d: %v", seed, s.stats)
		}
	}
	el := time.Since(start)
	t.Logf("pin rules, all attacks: %d seeds x %d steps: %d violating seeds %v in %v (%.0f steps/s); %v",
		len(seeds), steps, bad, kinds, el.Round(time.Millisecond), float64(total.steps)/el.Seconds(), total)
	for _, v := range first {
		t.Errorf("pin rules broke an invariant; replay with GONIXL_SIM_SEED=%d\n%s", v.seed, simExplain(v, cfg, steps))
	}
	if total.results[resDone] == 0 || total.results[resNotHeld] == 0 || total.forged == 0 || total.replayed == 0 || total.crashes == 0 || total.retries == 0 ||
		total.redelivered == 0 || total.refused == 0 || total.staged == 0 || total.chunked == 0 || total.reads == total.staged {
		t.Fatalf("the simulation did not exercise the protocol: %v", total)
	}
	if total.pins == 0 || total.pinsLate == 0 || total.pinsLost == 0 || total.stalled == 0 ||
		total.outcomes[completionStale] == 0 || total.outcomes[completionForeign] == 0 || total.outcomes[completionPlain] == 0 || total.staleSent == 0 || total.foreignSent == 0 {
		t.Fatalf("the pin faults did not happen: %v", total)
	}
	if long && len(seeds) > 1 && total.outlasted == 0 {
		t.Fatalf("no load's READs outlasted its pin: %v", total)
	}
	if total.released[relCompletion] == 0 || total.released[relExpire] == 0 || total.released[relClose] == 0 {
		t.Fatalf("some way of releasing a hold never happened: %v", total)
	}
}

// simAttacks are the attack classes that broke the legacy rules, each
// alone.
var simAttacks = []struct {
	name      string
	attacks   simAttack
	prefillTP int // 0: drawn per seed
}{
	{"clock step after handshake", atkClockAfterHS, 0},
	{"clock step during READ", atkClockDuringRead, 0},
	{"forged params", atkForge, 0},
	{"replay to second engine", atkReplay, 0},
	{"staging copy failure on one rank", atkStagingFail, 2},
	{"prefill rank crash and restart", atkCrash, 0},
	{"request id finished again", atkRetryID, 0},
	// An earlier hold of the id needs the id finished again.
	{"late completion of an earlier hold", atkRetryID | atkStaleCompletion, 0},
	{"completion from another engine's agent", atkForeignCompletion, 0},
}

// simPinFaults are the faults that matter to pins only (the legacy rules
// pin nothing, and their read guard and unmoved clock offset refuse the
// re-delivered load), each alone under the pin rules.
var simPinFaults = []struct {
	name    string
	attacks simAttack
}{
	{"pin delayed or lost, READ stalled", atkPinNet},
	{"params handed to the same engine again", atkRedeliver},
	{"late completion of an earlier hold", atkRetryID | atkStaleCompletion},
	{"completion from another engine's agent", atkForeignCompletion},
}

// TestSimFindsLegacyHoles shows that the simulation finds each attack
// class's violation under the legacy rules (so the pin rules' clean runs
// mean something), and that the seed that found it runs clean under the
// pin rules.
func TestSimFindsLegacyHoles(t *testing.T) {
	const maxSeeds, steps = 200, 20_000
	for _, a := range simAttacks {
		t.Run(a.name, func(t *testing.T) {
			var found *simViolation
			tried := 0
			for seed := uint64(1); seed <= maxSeeds && found == nil; seed++ {
				tried++
				// A wrong-byte done result, the attack's effect on decode;
				// other violations (prefill's own) do not count here.
				if v := simRun(seed, simConfig{rules: legacyRules, attacks: a.attacks, prefillTP: a.prefillTP}, steps).viol; v != nil && v.what == simWrongBytes {
					found = v
				}
			}
			if found == nil {
				t.Fatalf("no violation in %d seeds x %d steps under the legacy rules", maxSeeds, steps)
			}
			t.Logf("legacy rules, %s: found at seed %d step %d (%d seeds tried): %s: %s", a.name, found.seed, found.step, tried, found.what, found.detail)
			for seed := found.seed; seed < found.seed+3; seed++ {
				cfg := simConfig{rules: pinRules, attacks: a.attacks, prefillTP: a.prefillTP}
				if s := simRun(seed, cfg, steps); s.viol != nil {
					t.Fatalf("pin rules, %s:\n%s", a.name, simExplain(s.viol, cfg, steps))
				}
			}
		})
	}
}

// TestSimPinFaultsAlone runs each pin fault alone under the pin rules: no
// invariant may break, and the fault must have happened.
func TestSimPinFaultsAlone(t *testing.T) {
	const seeds, steps = 6, 20_000
	for _, f := range simPinFaults {
		t.Run(f.name, func(t *testing.T) {
			cfg := simConfig{rules: pinRules, attacks: f.attacks}
			var total simStats
			for seed := uint64(1); seed <= seeds; seed++ {
				s := simRun(seed, cfg, steps)
				if s.viol != nil {
					t.Fatalf("pin rules, %s:\n%s", f.name, simExplain(s.viol, cfg, steps))
				}
				total.add(s.stats)
			}
			happened := map[simAttack]bool{
				atkPinNet:                       total.pinsLost > 0 && total.stalled > 0 && total.pinsLate > 0,
				atkRedeliver:                    total.redelivered > 0 && total.refused > 0,
				atkRetryID | atkStaleCompletion: total.staleSent > 0 && total.outcomes[completionStale] > 0,
				atkForeignCompletion:            total.foreignSent > 0 && total.outcomes[completionForeign] > 0,
			}
			if !happened[f.attacks] {
				t.Fatalf("%s did not happen: %v", f.name, total)
			}
			t.Logf("%s: %v", f.name, total)
		})
	}
}

// TestSimCatchesPinMutants breaks the decode model's pin timing, one rule
// at a time, and shows that the invariants catch it, so that the pin
// rules' clean runs say something about the timing too. Stalled READs are
// made common (30 %): a pin's timing matters only to a READ that outlasts
// it while the hold's lease runs out too.
func TestSimCatchesPinMutants(t *testing.T) {
	const maxSeeds, steps = 60, 200_000
	for _, m := range []struct {
		name   string
		mutant simMutant
	}{
		{"no READ-within-pin check", mutNoPinWindow},
		{"pin shorter than the transfer timeout", mutShortPin},
	} {
		t.Run(m.name, func(t *testing.T) {
			cfg := simConfig{rules: pinRules, attacks: atkAll, stall: 0.3, mutant: m.mutant}
			for seed := uint64(1); seed <= maxSeeds; seed++ {
				if v := simRun(seed, cfg, steps).viol; v != nil {
					switch v.what {
					case simWrongBytes, simUncovered, simOutlasted:
						t.Logf("%s: caught at seed %d step %d: %s: %s", m.name, seed, v.step, v.what, v.detail)
						return
					}
					t.Fatalf("%s: another violation first:\n%s", m.name, simExplain(v, cfg, steps))
				}
			}
			t.Fatalf("%s: not caught in %d seeds x %d steps", m.name, maxSeeds, steps)
		})
	}
	// The control: the same configuration without a mutant runs clean.
	for seed := uint64(1); seed <= 3; seed++ {
		cfg := simConfig{rules: pinRules, attacks: atkAll, stall: 0.3}
		if s := simRun(seed, cfg, steps); s.viol != nil {
			t.Fatalf("pin rules with stalled READs:\n%s", simExplain(s.viol, cfg, steps))
		}
	}
}

// TestSimLegacyCleanWithoutAttacks is the control: the legacy rules
// survive the network, aborts, block reuse and rank lag on their own, so
// each violation TestSimFindsLegacyHoles finds is its attack's.
func TestSimLegacyCleanWithoutAttacks(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		s := simRun(seed, simConfig{rules: legacyRules}, 20_000)
		if s.viol != nil {
			t.Fatalf("legacy rules without attacks:\n%s", simExplain(s.viol, simConfig{rules: legacyRules}, 20_000))
		}
		if s.stats.results[resDone] == 0 {
			t.Fatalf("seed %d: nothing was done: %v", seed, s.stats)
		}
	}
}

// TestSimSeedReplays runs seeds twice, one of them to a violation: the
// trace hash, the step count and the violation must be the same, so a
// failing seed replays to the same failure.
func TestSimSeedReplays(t *testing.T) {
	for _, tc := range []struct {
		seed uint64
		cfg  simConfig
	}{
		{3, simConfig{rules: pinRules, attacks: atkAll}},
		{1, simConfig{rules: legacyRules, attacks: atkReplay}},
	} {
		a, b := simRun(tc.seed, tc.cfg, 20_000), simRun(tc.seed, tc.cfg, 20_000)
		if a.hash != b.hash || a.step != b.step || a.stats != b.stats {
			t.Fatalf("seed %d (%v rules) ran differently twice: hash %x/%x, steps %d/%d", tc.seed, tc.cfg.rules, a.hash, b.hash, a.step, b.step)
		}
		if (a.viol == nil) != (b.viol == nil) || a.viol != nil && a.viol.String() != b.viol.String() {
			t.Fatalf("seed %d: violations differ:\n%v\n%v", tc.seed, a.viol, b.viol)
		}
		if tc.cfg.rules == legacyRules && a.viol == nil {
			t.Fatalf("seed %d under the legacy rules was expected to break an invariant", tc.seed)
		}
	}
}

// TestSimFindingSlotReusedAfterAFailedGather replays on the real Producers,
// Engine and Consumer what the simulation found (invariant 4, then a done
// result with another request's bytes): with ParamsAfterAllRanks, rank 1's
// gather of x fails and gives slot index 0 back; y then takes index 0 on
// both ranks; rank 0's RequestFinished(x) comes last and, before
// slotIndex.decide checked the index's owner, was handed index 0 by the
// decision rank 1 left behind (slotIndex.byID), so it gathered x into rank
// 0's slot 0 while y held it. y's Params and keys still match, so its pins
// are granted on both ranks, and its load was done with x's bytes in rank
// 0's part. Now x gets a slot of its own (or none) and y's load is done
// with y's bytes. (Gathers now run in the background, and a failed one
// keeps its slot until the hold ends: the order is replayed all the same.)
func TestSimFindingSlotReusedAfterAFailedGather(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	failing := &stagingtest.Copier{FailAt: 1} // rank 1's first chunk of x
	c := stagedCluster(t, clusterOpts{prefill: side{2, 16},
		prefillCfg: func(rc *Config) {
			rc.ParamsAfterAllRanks = true
			if rc.Layout.TPRank == 1 {
				rc.Staging.Copier = failing
			}
		}}, m)
	xb, yb := []int{1}, []int{2}
	c.fill(1, xb, 16)
	c.fill(2, yb, 16)
	_, err := c.prods[1].RequestFinished("x", xb)
	require.NoError(t, err, "the gather fails in the background")
	// Failed before y's gathers start: rank 1's copy number 1 is x's.
	eventually(t, func() bool { return failing.Count() == 1 })
	py := c.finish("y", yb)
	require.NotNil(t, py.RemoteStagingSlot)
	px, err := c.prods[0].RequestFinished("x", xb)
	require.NoError(t, err)
	if px.RemoteStagingSlot != nil {
		require.NotEqual(t, *py.RemoteStagingSlot, *px.RemoteStagingSlot, "x was gathered into the slot y holds")
	}
	c.load("dy", py, []int{5})
	require.NoError(t, c.notDoneOrRight(c.result("dy")[0], 2, []int{5}, 16), "y is still held as its Params say")
}

// TestSimFindingHoldKeyReusedByALaterHold checks, on the real Producers,
// Engine and Consumer, what a pin's hold key rests on: a later hold of the
// same id does not get the key of an earlier one. Rank 1's gather of r
// fails, so only rank 0 took the engine's advert of r (pullEngine.advert).
// Decode rank 0, which reads prefill rank 0 alone (TP 2 to 2), pins r
// there, reads it and sends the completion naming the hold, which releases
// rank 0's hold before its deadline. The engine finishes r again in the
// same block and slot: before Producer.onCompletion dropped the advert
// (Engine.dropAdverts), rank 0 inherited it, deadline and nonce, hence
// the first hold's key, and a pin sent for the first hold, by a reader
// whose READ ran while block 1 was free, was granted for the second.
// (Gathers now run in the background: rank 1's RequestFinished holds r
// too, and its gather fails later; the keys must differ all the same.)
func TestSimFindingHoldKeyReusedByALaterHold(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	failing := &stagingtest.Copier{FailAt: 1} // rank 1's gather of the first r
	c := stagedCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{2, 16},
		prefillCfg: func(rc *Config) {
			rc.ParamsAfterAllRanks = true
			if rc.Layout.TPRank == 1 {
				rc.Staging.Copier = failing
			}
		}}, m)
	c.fill(1, []int{1}, 16)
	p1, err := c.prods[0].RequestFinished("r", []int{1})
	require.NoError(t, err)
	_, err = c.prods[1].RequestFinished("r", []int{1})
	require.NoError(t, err, "the gather fails in the background")
	require.NoError(t, c.cons[0].Load("d1", p1, []int{5}))
	var res *connector.Result
	for deadline := time.Now().Add(10 * time.Second); res == nil; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no result for d1")
		for _, r := range c.cons[0].Drain() {
			if r.RequestID == "d1" {
				res = &r
			}
		}
	}
	require.NoError(t, res.Err, "decode rank 0 reads prefill rank 0, which holds r as p1 says")
	for deadline := time.Now().Add(5 * time.Second); c.prods[0].Held() != 0; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "rank 0 never released the first hold on the completion naming it")
	}
	p2, err := c.prods[0].RequestFinished("r", []int{1})
	require.NoError(t, err)
	ref := handshake.HoldRef{ID: "r", Key: p1.holdKey(), N: 2, Ranks: []int{0}, PinMicros: time.Minute.Microseconds()}
	verdict := pullOf(t, c.pe).confirm("decode-b", "decode-b-agent-0", []handshake.HoldRef{ref})
	require.NotEqual(t, p1.holdKey(), p2.holdKey(), "the second hold of r has the first one's key (deadline %v, nonce %x, slot %s both times); a pin of the first is answered %q",
		p2.RemoteBlocksExpiryTime, p2.RemoteHoldNonce, simSlot(p2.RemoteStagingSlot), verdict[0])
	require.NotEmpty(t, verdict[0], "a pin of the first hold's key is granted for the second")
}

// The three tests below replay on a real *holds what the simulation found
// under the pin rules; each fails until the rule it names is fixed.

// TestSimFindingOverdueHoldReleasedBeforeItsDeadline: a pinned hold whose
// lease runs out becomes overdue, and holds.expire released it as soon as
// its pin ended, without asking the wall clock again: after the rank's
// clock stepped back, it released the hold before the deadline it
// advertised, by its own clock (invariant 2). A decode that trusts that
// deadline (vLLM's, or ours before the pin is answered) still reads.
func TestSimFindingOverdueHoldReleasedBeforeItsDeadline(t *testing.T) {
	h, err := newHolds(1, 2*time.Second, 16)
	require.NoError(t, err)
	wall, mono := simEpoch, time.Unix(5000, 0)
	require.NoError(t, h.finish("r", []int{1}, wall)) // the lease ends at wall+2s
	h.setKey("r", 7)
	require.Empty(t, h.pin("r", 7, "decode-a", "decode-a/0", mono.Add(time.Second)))
	// The wall clock steps 3 s forward: the lease ran out, the pin keeps it.
	require.Empty(t, h.expire(wall.Add(3*time.Second), mono.Add(100*time.Millisecond)))
	// It steps 2.5 s back, before the deadline again; the pin ends.
	require.Empty(t, h.expire(wall.Add(500*time.Millisecond), mono.Add(1500*time.Millisecond)),
		"released at %v, before the deadline it advertised (%v), once the pin ended", wall.Add(500*time.Millisecond), wall.Add(2*time.Second))
	require.Equal(t, []string{"r"}, h.expire(wall.Add(2*time.Second), mono.Add(1600*time.Millisecond)))
}

// TestSimFindingPinAfterAnotherDecodesCompletion: prefill TP 1 and decode
// A of TP 2, whose two ranks both read the rank, which expects two
// completions. A vLLM decode that got the Params (a replay; it never pins)
// read the blocks and sent its plain completion while the hold was bound
// to no engine: it counted. A's two pins were then granted; A's rank 0
// finished first, and its completion, the second counted, released the
// hold while A's rank 1 still read under its pin (1b; with the blocks
// reused, wrong bytes). A pin must not be granted on a hold that counted a
// completion from an agent that is not the pinning engine's.
func TestSimFindingPinAfterAnotherDecodesCompletion(t *testing.T) {
	h, err := newHolds(1, 2*time.Second, 16)
	require.NoError(t, err)
	mono := time.Unix(5000, 0)
	require.NoError(t, h.finish("r", []int{1}, simEpoch))
	h.setKey("r", 7)
	out, _ := h.complete(notif.Completion{ID: "r", N: 2}, "vllm-c/0")
	require.Equal(t, completionCounted, out)
	v0 := h.pin("r", 7, "decode-a", "decode-a/0", mono.Add(2*time.Second))
	v1 := h.pin("r", 7, "decode-a", "decode-a/1", mono.Add(2*time.Second))
	if v0 == "" && v1 == "" {
		out, _ = h.complete(notif.Completion{ID: "r", N: 2, Seq: 7}, "decode-a/0")
		require.NotEqual(t, completionDone, out, "decode-a/0's completion released the hold while decode-a/1's pinned READ may run")
	}
}

// TestSimFindingPinAfterTheAgentsOwnCompletion: prefill TP 1, decode A of
// TP 2. A's rank 0 pinned, read and sent its completion (one of two
// counted); rank 1's pin verdict was lost, so its load failed and sent
// none. The proxy handed A the Params again; rank 0's read guard had run
// out (readGuard.read, until the deadline rank 0 knew), so both ranks loaded
// them again, and both pins were granted. Rank 1 finished first: its
// completion released the hold while rank 0's second READ ran (1b). A pin
// must not be granted to an agent whose completion the hold counted: that
// agent's READ is no longer one the hold waits for.
func TestSimFindingPinAfterTheAgentsOwnCompletion(t *testing.T) {
	h, err := newHolds(1, 2*time.Second, 16)
	require.NoError(t, err)
	mono := time.Unix(5000, 0)
	require.NoError(t, h.finish("r", []int{1}, simEpoch))
	h.setKey("r", 7)
	require.Empty(t, h.pin("r", 7, "decode-a", "decode-a/0", mono.Add(2*time.Second)))
	require.Empty(t, h.pin("r", 7, "decode-a", "decode-a/1", mono.Add(2*time.Second)))
	out, _ := h.complete(notif.Completion{ID: "r", N: 2, Seq: 7}, "decode-a/0")
	require.Equal(t, completionCounted, out)
	if h.pin("r", 7, "decode-a", "decode-a/0", mono.Add(3*time.Second)) == "" {
		require.Empty(t, h.pin("r", 7, "decode-a", "decode-a/1", mono.Add(3*time.Second)))
		out, _ = h.complete(notif.Completion{ID: "r", N: 2, Seq: 7}, "decode-a/1")
		require.NotEqual(t, completionDone, out, "decode-a/1's completion released the hold while decode-a/0's second, pinned READ may run")
	}
}
