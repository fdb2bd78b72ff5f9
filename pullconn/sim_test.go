package pullconn

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
)

// A deterministic simulation of the pull protocol, in the style of etcd
// raft's and FoundationDB's: one seed drives a prefill engine and two decode
// engines through delayed, reordered, duplicated and lost messages, clock
// steps, crashes, forged and replayed Params, staging failures and block
// reuse, and after every step the simulation checks that
//
//  1. no decode load is done with bytes other than its request's (and,
//     1b, under the confirm rules none is done unless the hold each
//     prefill rank confirmed is the one that was live as its READ
//     completed),
//  2. prefill releases every hold it made exactly once (completion,
//     expiry or close) and never before the deadline it advertised,
//  3. every decode load ends exactly once, and
//  4. the prefill engine never rewrites a block or staging slot while a
//     hold covering it is live.
//
// What is real code: each prefill rank's protocol state is a real *holds
// (finish, setKey, bind, confirm, complete, heartbeat, heartbeatFor, abort,
// expire, releaseAll), the engine's staging slots are a real slotIndex,
// Params, their holdKey, expirySeconds and expiry are the real ones, and
// decode ranks pair with prefill ranks by the real notifyRanks. What is
// modeled: the glue around them (Producer.RequestFinished's order of
// finish, advertise, extend and setKey; Engine.advertise, which
// TestSimAdvertiseMirrorsEngine compares with the real one; Engine.extend
// and Engine.confirm's aggregation over ranks; Producer.extendHolds), which
// is mirrored here, and the decode rank, a small state machine that follows
// the Consumer's rules (post, succeed, pollLoad, holdDeadline, heartbeat,
// applyHoldAnswer, applyVerdicts) under one of two rule sets.
//
// Memory is modeled by tags: every prefill block and slot holds the tag of
// the request (and rank) whose KV it holds; a READ copies the tags at its
// completion, so a block rewritten while a READ is in flight is seen.

// simRules is the decode rule set under test.
type simRules int

const (
	// confirmRules: this revision. Done only on prefill's "" verdict to a
	// confirmation sent after the READs completed, which is also the
	// completion; hold queries bind holds to the asking engine.
	confirmRules simRules = iota + 1
	// legacyRules: main at b6a750d. Done when the READs completed before the
	// converted deadline (the handshake's clock offset); each READ carries
	// the completion "<id>:<n>"; nothing binds a hold to an engine.
	legacyRules
)

func (r simRules) String() string {
	if r == legacyRules {
		return "legacy"
	}
	return "confirm"
}

// simAttack is a set of attacks (fault classes that a decode may not
// survive unless the protocol guards against them).
type simAttack uint32

const (
	atkClockAfterHS    simAttack = 1 << iota // clocks step while no READ is in flight
	atkClockDuringRead                       // clocks step while a READ is in flight
	atkForge                                 // Params with another id, other blocks, slot or deadline
	atkReplay                                // Params replayed to decode engine B
	atkStagingFail                           // one prefill rank's gather failed; its Params go out anyway
	atkCrash                                 // a prefill rank crashes and restarts, losing its memory
	atkRetryID                               // a prefill request id is finished again after its hold ended
	atkAll             = atkClockAfterHS | atkClockDuringRead | atkForge | atkReplay | atkStagingFail | atkCrash | atkRetryID
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
	simBlocks          = 16
	simSlots           = 3
	simMaxReqs         = 6
	simRetryRing       = 16
)

// simConfig is one simulation's shape. Everything else (the decode
// engines' TP sizes, staging, the block allocator, ParamsAfterAllRanks
// where staging does not force it) is drawn per seed.
type simConfig struct {
	rules   simRules
	attacks simAttack
	// prefillTP is the prefill engine's TP size; 0: 1 or 2 drawn per seed.
	prefillTP int
}

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
	relCompletion simRelease = iota + 1 // a NIXL completion (legacy)
	relConfirm                          // a confirmation
	relExpire
	relClose // Close or a crash
	simReleases
)

var simReleaseNames = [...]string{relCompletion: "completion", relConfirm: "confirmation", relExpire: "expiry", relClose: "close"}

// simStats are a run's totals.
type simStats struct {
	steps, requests, loads, retries, forged, replayed, crashes, holds int
	results                                                           [simResults]int
	released                                                          [simReleases]int
	simTime                                                           time.Duration
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
	a.simTime += b.simTime
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
	return b.String()
}

// simWrongBytes is invariant 1's violation, simUncovered 1b's.
const (
	simWrongBytes = "done with wrong bytes"
	simUncovered  = "done on a READ no confirmed hold covered"
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
	liveLoads      int
	readsInFlight  int
	pendingFinish  int
	pendingParams  int
	nextCid        int
	nextJunk       int
	nextCall       uint64
	nextLoad       int
	retryRing      []string // ids the engine freed, for atkRetryID
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
	afterAll bool // RankConfig.ParamsAfterAllRanks
	lifo     bool // blocks are allocated most recently freed first (else at random)
	adverts  map[string]*advert
	reqs     []*simReq // owning blocks at the engine
	byID     map[string]*simReq
	down     int
}

// simRank is one prefill rank: a real *holds, its clock, its memory, and
// the model's ledger of the holds it made.
type simRank struct {
	r         int
	clock     simClock
	h         *holds
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
}

// simDecode is one decode engine: its clock, its handshake with the
// prefill engine (shared by its ranks) and its ranks.
type simDecode struct {
	idx    int
	name   string
	tp     int
	clock  simClock
	hs     simHS
	ranks  []*simDRank
	parked []*simLoad
}

type simHS struct {
	state    int // 0 none, 1 pending, 2 ready
	call     uint64
	sent     time.Time
	off, unc time.Duration
	inc      []int
}

// simDRank is one decode rank (a Consumer).
type simDRank struct {
	e         *simDecode
	j         int
	agent     string
	notify    []int // and sources: for TP 1 and 2 they coincide
	off, unc  time.Duration
	confirmed map[string]time.Time
	querying  bool
	qcall     uint64
	lastHB    time.Time
	live      []*simLoad
	ticking   bool
}

const (
	ldParked uint8 = iota + 1
	ldReading
	ldConfirming
	ldEnded
)

// simLoad is one decode rank's load of one Params.
type simLoad struct {
	n        int
	dr       *simDRank
	p        *Params
	key      uint64
	truth    int // the content id of the request the Params name
	exp      time.Time
	guarded  bool
	state    uint8
	pending  int
	wrong    bool
	deadline time.Time
	call     uint64
	sent     time.Time
	kind     string
	// direct: the Params name a slot, but this rank READs the blocks (no
	// staging slot of its own was free); prefill holds both.
	direct bool
	// seen is, by prefill rank, the request whose KV the READ from that
	// rank read as it completed: the one whose hold was live then, or, for
	// blocks read directly, the one whose forward pass wrote them and whose
	// RequestFinished on that rank is still to come (nil: neither).
	seen []*simReq
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
		nextJunk: simJunkBase}
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
	p := &simPrefill{tp: tp, adverts: map[string]*advert{}, byID: map[string]*simReq{}}
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
	for i := range tp {
		rk := &simRank{r: i, up: true, blocks: make([]uint64, simBlocks), slotMem: make([]uint64, simSlots),
			held: map[string]*simHold{}, cover: make([]int, simBlocks), slotCover: make([]int, simSlots)}
		rk.h = s.newHolds(tp)
		if p.staging {
			if err := p.slots.join(&staging.Config{Mode: staging.ModeOn, Slots: simSlots, SlotBytes: 1 << 20}, p.afterAll); err != nil {
				panic(err)
			}
		}
		p.ranks = append(p.ranks, rk)
	}
	s.p = p
	for i := range s.d {
		dtp := 1 + r.IntN(2)
		e := &simDecode{idx: i, name: "decode-" + string(rune('a'+i)), tp: dtp}
		for j := range dtp {
			notify, err := notifyRanks(j, dtp, tp)
			if err != nil {
				panic(err)
			}
			e.ranks = append(e.ranks, &simDRank{e: e, j: j, agent: e.name + "/" + strconv.Itoa(j), notify: notify, confirmed: map[string]time.Time{}})
		}
		s.d[i] = e
	}
	// The faults the chaos event injects (one event every 32 ms on average;
	// with every attack on, a clock step about every 110 ms, a crash about
	// every 1 s): 0 clock step, 1 crash, 2 prefill abort, 3 decode abort,
	// -1 nothing.
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

func (s *sim) newHolds(tp int) *holds {
	h, err := newHolds(tp, simLease, 1024)
	if err != nil {
		panic(err)
	}
	return h
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
		s.release(rk, s.sortedIDs(rk.h.releaseAll()), relClose)
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
		s.handle(e.msg)
	case evRead:
		s.readDone(e.load, e.a, e.b)
	case evTimeout:
		s.timeout(e)
	case evDTick:
		s.dtick(s.d[e.a].ranks[e.b])
	case evPTick:
		s.ptick(s.p.ranks[e.a])
	case evChaos:
		s.chaos()
	case evRestart:
		s.restart(s.p.ranks[e.a])
	}
	s.check()
}

// check is the per-step invariant check; the event handlers check the
// rest as things happen (incremental bookkeeping, no scans).
func (s *sim) check() {
	for _, rk := range s.p.ranks {
		if n := rk.h.len(); n != rk.nheld || rk.h.leases.Len() != n {
			s.violate("release", "rank %d: holds has %d requests and %d leases, the model %d live holds (a hold vanished or was kept without being reported)",
				rk.r, n, rk.h.leases.Len(), rk.nheld)
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
	cid := 0
	if s.cfg.attacks&atkRetryID != 0 && len(s.retryRing) > 0 && s.chance(0.3) {
		id := s.lastFreed
		if s.chance(0.5) {
			id = s.retryRing[s.rng.IntN(len(s.retryRing))]
		}
		if p.byID[id] == nil {
			cid, _ = strconv.Atoi(id[1:])
			s.stats.retries++
		}
	}
	if cid == 0 {
		s.nextCid++
		cid = s.nextCid
	}
	q := &simReq{id: simID(cid), cid: cid, failRank: -1, lost: make([]bool, p.tp), ranDone: make([]bool, p.tp)}
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
// staging slot first (a failed gather holds nothing), then holds.finish,
// the engine's advertised deadline (a rank whose own lease ends earlier
// extends to it), the Params and holds.setKey.
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
			p.slots.release(i) // the gather failed: ErrStaging, nothing held
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
	if err := rk.h.finish(id, q.blocks, now); err != nil {
		s.violate("model", "rank %d: finish %s: %v", r, id, err)
		return
	}
	deadline, _ := rk.h.leases.Deadline(id)
	adv := p.advertise(id, now, deadline)
	if adv.After(deadline) {
		rk.h.leases.Extend(id, adv, 0)
	}
	params := Params{DoRemotePrefill: true, RemoteBlockIDs: slices.Clone(q.blocks), RemoteEngineID: "prefill", RemoteRequestID: id,
		RemoteHost: "127.0.0.1", RemotePort: 5600, TPSize: p.tp, PPSize: 1, TransferMode: handshake.ModePull,
		RemoteBlocksExpiryTime: expirySeconds(adv)}
	if slot >= 0 {
		v := slot
		params.RemoteStagingSlot = &v
	}
	key := params.holdKey()
	rk.h.setKey(id, key)
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

// advertise mirrors Engine.advertise: every rank of the engine advertises
// the deadline of the first rank that finished the request.
func (p *simPrefill) advertise(id string, now, own time.Time) time.Time {
	a, ok := p.adverts[id]
	if !ok || !now.Before(a.deadline) {
		if len(p.adverts) > 256 {
			for k, v := range p.adverts {
				if !now.Before(v.deadline) {
					delete(p.adverts, k)
				}
			}
		}
		a = &advert{deadline: own}
		p.adverts[id] = a
	}
	a.ranks++
	d := a.deadline
	if a.ranks >= p.tp {
		delete(p.adverts, id)
	}
	return d
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
// once, and by expiry never before the deadline the rank advertised.
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
// and under attack also replays them to B, or forges a copy.
func (s *sim) handOut(q *simReq) {
	if q.handed {
		return
	}
	q.handed = true
	d := s.between(100*time.Microsecond, 5*time.Millisecond)
	if s.chance(s.proxySlowShare) {
		d = s.between(0, 3*simLease/2)
	}
	s.sendParams(d, &simDelivery{p: q.params, truth: q.cid, eng: 0, kind: "genuine"})
	if s.cfg.attacks&atkReplay != 0 && s.chance(0.5) {
		s.stats.replayed++
		s.sendParams(s.between(0, 2*simLease), &simDelivery{p: q.params, truth: q.cid, eng: 1, kind: "replay"})
	}
	if s.cfg.attacks&atkForge != 0 && s.chance(0.3) {
		s.stats.forged++
		f := *q.params
		how := ""
		switch s.rng.IntN(5) {
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

// ptick is the Producer's poller tick: leases that ran out are released.
func (s *sim) ptick(rk *simRank) {
	rk.ticking = false
	if !rk.up {
		return
	}
	now := s.now(&rk.clock)
	if ids := rk.h.expire(now); len(ids) > 0 {
		s.release(rk, ids, relExpire)
	}
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
	case mConfirm:
		s.onConfirm(m)
	case mCompletion:
		s.onCompletion(m)
	case mHeartbeat:
		if rk := s.p.ranks[m.prank]; rk.up {
			rk.h.heartbeat(m.ids, s.now(&rk.clock), simHBExtension)
		}
	case mHelloReply:
		s.onHelloReply(m)
	case mQueryReply:
		s.onQueryReply(m)
	case mConfirmReply:
		s.onVerdict(m)
	}
}

// onHello is the side channel's handshake: the payload with the ranks'
// agent metadata (incarnations) and the engine's clock, or "retry" while a
// rank is restarting.
func (s *sim) onHello(m *simMsg) {
	p := s.p
	r := &simMsg{kind: mHelloReply, call: m.call, eng: m.eng, sent: m.sent, now: s.now(&p.ranks[0].clock).UnixNano()}
	if p.down > 0 {
		r.retry = true
	} else {
		for _, rk := range p.ranks {
			r.inc = append(r.inc, rk.inc)
		}
	}
	s.send(r)
}

// onQuery mirrors Engine.extend and Producer.extendHolds (legacy: the
// b6a750d versions, which bind nothing).
func (s *sim) onQuery(m *simMsg) {
	p := s.p
	reader := s.d[m.eng].name
	out := make([]int64, len(m.ids))
	remoteNow := s.now(&p.ranks[0].clock).UnixNano()
	if p.down == 0 {
		for i, rk := range p.ranks {
			now := s.now(&rk.clock)
			ds := make([]time.Time, len(m.ids))
			if s.cfg.rules == legacyRules {
				rk.h.heartbeat(m.ids, now, simHBExtension)
				for k, id := range m.ids {
					if r, ok := rk.h.reqs[id]; ok && !r.aborted {
						ds[k], _ = rk.h.leases.Deadline(id)
					}
				}
			} else {
				for _, id := range m.ids {
					rk.h.bind(id, reader, m.agent)
				}
				rk.h.heartbeatFor(m.ids, reader, now, simHBExtension)
				for k, id := range m.ids {
					if r, ok := rk.h.reqs[id]; ok && !r.aborted && r.reader == reader {
						ds[k], _ = rk.h.leases.Deadline(id)
					}
				}
			}
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
	}
	s.send(&simMsg{kind: mQueryReply, call: m.call, eng: m.eng, rank: m.rank, ids: m.ids, holds: out, now: remoteNow, sent: m.sent})
}

// onConfirm mirrors Engine.confirm and Producer.confirmHold: "" when every
// rank named still holds exactly that hold for the asking engine; each
// rank counts the confirmation as the agent's completion.
func (s *sim) onConfirm(m *simMsg) {
	p := s.p
	reader := s.d[m.eng].name
	why := ""
	var confirmed []*simHold
	if p.down > 0 {
		why = "prefill engine does not have all its ranks"
	} else {
		for _, r := range m.ref.Ranks {
			rk := p.ranks[r]
			hd := rk.held[m.ref.ID]
			v, out := rk.h.confirm(m.ref.ID, m.ref.Key, m.ref.N, reader, m.agent)
			confirmed = append(confirmed, hd)
			if out == completionDone {
				if hd == nil || hd.key != m.ref.Key {
					s.violateID(m.ref.ID, "release", "rank %d: a confirmation of key %x released %s, whose hold has another key", r, m.ref.Key, m.ref.ID)
				}
				s.release(rk, []string{m.ref.ID}, relConfirm)
			}
			if v != "" && why == "" {
				why = fmt.Sprintf("rank %d: %s", r, v)
			}
		}
	}
	s.send(&simMsg{kind: mConfirmReply, call: m.call, eng: m.eng, rank: m.rank, load: m.load, why: why, now: s.now(&p.ranks[0].clock).UnixNano(), sent: m.sent, id: m.ref.ID,
		confirmed: confirmed})
}

// onCompletion is Producer.onCompletion: a NIXL "<id>:<n>" (legacy
// decodes send them with their READs).
func (s *sim) onCompletion(m *simMsg) {
	rk := s.p.ranks[m.prank]
	if !rk.up {
		return
	}
	if out, _ := rk.h.complete(notif.Completion{ID: m.id, N: m.n}, m.agent); out == completionDone {
		s.release(rk, []string{m.id}, relCompletion)
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
				rk.h.abort(q.id) // Producer.Abort: no more extensions
			}
			s.trace("prefill-abort", "", 0, 0, q.id)
		}
	case 3:
		e := s.d[s.rng.IntN(2)]
		dr := e.ranks[s.rng.IntN(len(e.ranks))]
		if n := len(dr.live); n > 0 {
			s.end(dr.live[s.rng.IntN(n)], resAborted)
		}
	}
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
	ids := s.sortedIDs(rk.h.releaseAll())
	s.release(rk, ids, relClose)
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
	rk.h = s.newHolds(s.p.tp)
	rk.up = true
	rk.inc++
	s.p.down--
	if s.p.staging {
		if err := s.p.slots.join(&staging.Config{Mode: staging.ModeOn, Slots: simSlots, SlotBytes: 1 << 20}, s.p.afterAll); err != nil {
			panic(err)
		}
	}
	s.trace("restart", "", rk.r, rk.inc, "")
}

// ---- decode ----

// deliver is Consumer.Load on every rank of a decode engine.
func (s *sim) deliver(del *simDelivery) {
	if s.viol != nil {
		return
	}
	e := s.d[del.eng]
	exp, guarded := del.p.expiry()
	key := del.p.holdKey()
	s.trace("load", del.kind, e.idx, 0, del.p.RemoteRequestID)
	for _, dr := range e.ranks {
		s.nextLoad++
		l := &simLoad{n: s.nextLoad, dr: dr, p: del.p, key: key, truth: del.truth, exp: exp, guarded: guarded, kind: del.kind}
		dr.live = append(dr.live, l)
		s.liveLoads++
		s.stats.loads++
		if e.hs.state == 2 {
			s.post(l)
			continue
		}
		l.state = ldParked
		e.parked = append(e.parked, l)
	}
	if e.hs.state == 0 {
		s.startHandshake(e)
	}
}

func (s *sim) startHandshake(e *simDecode) {
	s.nextCall++
	e.hs = simHS{state: 1, call: s.nextCall, sent: s.now(&e.clock)}
	s.send(&simMsg{kind: mHello, call: e.hs.call, eng: e.idx, sent: e.hs.sent})
	s.schedule(simHSTimeout, simEvent{kind: evTimeout, a: 1, b: e.idx, x: e.hs.call})
}

func (s *sim) onHelloReply(m *simMsg) {
	e := s.d[m.eng]
	if e.hs.state != 1 || e.hs.call != m.call {
		return
	}
	if m.retry {
		// The client asks again after 20 ms, within its timeout.
		s.schedule(20*time.Millisecond, simEvent{kind: evMsg, msg: &simMsg{kind: mHello, call: m.call, eng: m.eng, sent: e.hs.sent}})
		return
	}
	off, unc := simMeasure(e.hs.sent, s.now(&e.clock), m.now)
	e.hs.state, e.hs.off, e.hs.unc, e.hs.inc = 2, off, unc, m.inc
	for _, dr := range e.ranks {
		dr.off, dr.unc = off, unc
	}
	parked := e.parked
	e.parked = nil
	for _, l := range parked {
		if l.state == ldParked {
			s.post(l)
		}
	}
}

// simMeasure mirrors handshake.measure.
func simMeasure(sent, got time.Time, remoteNow int64) (off, unc time.Duration) {
	mid := sent.Add(got.Sub(sent) / 2)
	return time.Unix(0, remoteNow).Sub(mid), got.Sub(sent)/2 + time.Microsecond
}

// holdDeadline mirrors Consumer.holdDeadline: the Params' deadline on this
// clock (legacy: with the handshake's offset, never updated), or a later
// one a hold query confirmed, less the margin.
func (s *sim) holdDeadline(l *simLoad) (time.Time, bool) {
	if !l.guarded {
		return time.Time{}, false
	}
	dr := l.dr
	off, unc := dr.off, dr.unc
	if s.cfg.rules == legacyRules {
		off, unc = dr.e.hs.off, dr.e.hs.unc
	}
	d := l.exp.Add(-off - unc)
	if t, ok := dr.confirmed[l.p.RemoteRequestID]; ok && t.After(d) {
		d = t
	}
	return d.Add(-simMargin), true
}

// post mirrors Consumer.post: no READ once the deadline passed; one READ
// per prefill rank read, each taking its own time.
func (s *sim) post(l *simLoad) {
	dr, e := l.dr, l.dr.e
	now := s.now(&e.clock)
	if hold, ok := s.holdDeadline(l); ok && !now.Before(hold) {
		s.end(l, resExpired)
		return
	}
	if l.p.TPSize != s.p.tp {
		s.end(l, resTransfer)
		return
	}
	for _, src := range dr.notify {
		if rk := s.p.ranks[src]; !rk.up || e.hs.inc[src] != rk.inc {
			// The agent this handshake loaded is gone: the post fails and
			// the engine is forgotten (forgetIfGone).
			e.hs.state = 0
			s.end(l, resTransfer)
			return
		}
	}
	l.state = ldReading
	l.direct = l.p.RemoteStagingSlot != nil && s.chance(0.25)
	l.seen = make([]*simReq, s.p.tp)
	for _, src := range dr.notify {
		s.copyCheck(l, src)
	}
	l.pending = len(dr.notify)
	l.deadline = now.Add(simTransferTimeout)
	for _, src := range dr.notify {
		s.readsInFlight++
		s.schedule(s.readTime(), simEvent{kind: evRead, load: l, a: src, b: s.p.ranks[src].inc})
	}
	s.trace("post", "", e.idx, dr.j, l.p.RemoteRequestID)
	s.ensureDTick(dr)
}

func (s *sim) readTime() time.Duration {
	switch u := s.rng.Float64(); {
	case u < 0.02:
		return s.between(50*time.Millisecond, 1500*time.Millisecond)
	case u < 0.2:
		return s.between(2*time.Millisecond, 50*time.Millisecond)
	default:
		return s.between(50*time.Microsecond, 2*time.Millisecond)
	}
}

// readDone is a READ from prefill rank src completing: it copies what the
// blocks (or the slot) hold now. Under the legacy rules it also delivers
// the completion it carries, whatever became of the load.
func (s *sim) readDone(l *simLoad, src, inc int) {
	s.readsInFlight--
	rk := s.p.ranks[src]
	ok := rk.up && rk.inc == inc
	s.trace("read-done", simResultOK(ok), l.dr.e.idx, src, l.p.RemoteRequestID)
	if ok {
		s.copyCheck(l, src)
		l.seen[src] = s.covering(l, rk)
		if s.cfg.rules == legacyRules {
			s.send(&simMsg{kind: mCompletion, prank: src, agent: l.dr.agent, id: l.p.RemoteRequestID, n: l.dr.e.tp, eng: l.dr.e.idx, rank: l.dr.j})
		}
	}
	if l.state != ldReading {
		return
	}
	if !ok {
		l.dr.e.hs.state = 0 // forgetIfGone
		s.end(l, resTransfer)
		return
	}
	if l.pending--; l.pending == 0 {
		s.succeed(l)
	}
}

// copyCheck compares what a READ from prefill rank src reads now with
// the request's bytes. It runs as the READ is posted and as it completes:
// a real READ copies at some moment in between, and a block rewritten in
// between is rewritten at one end or the other unless it was rewritten
// back (then (1b) still sees the READ outside the hold).
func (s *sim) copyCheck(l *simLoad, src int) {
	rk := s.p.ranks[src]
	want := simTag(l.truth, src)
	if slot := l.p.RemoteStagingSlot; slot != nil && s.p.staging && !l.direct {
		if rk.slotMem[*slot] != want {
			l.wrong = true
		}
		return
	}
	for _, b := range l.p.RemoteBlockIDs {
		if rk.blocks[b] != want {
			l.wrong = true
		}
	}
}

func simResultOK(ok bool) string {
	if ok {
		return "ok"
	}
	return "failed"
}

// succeed mirrors Consumer.succeed: done only if the READs were seen
// complete before the deadline; under the confirm rules, only once prefill
// confirms the hold.
func (s *sim) succeed(l *simLoad) {
	dr := l.dr
	now := s.now(&dr.e.clock)
	if hold, ok := s.holdDeadline(l); ok && !now.Before(hold) {
		s.end(l, resExpired)
		return
	}
	if s.cfg.rules == legacyRules {
		s.done(l)
		return
	}
	s.nextCall++
	l.state, l.call, l.sent = ldConfirming, s.nextCall, now
	ref := handshake.HoldRef{ID: l.p.RemoteRequestID, Key: l.key, N: dr.e.tp, Ranks: dr.notify}
	s.send(&simMsg{kind: mConfirm, call: l.call, eng: dr.e.idx, rank: dr.j, agent: dr.agent, ref: ref, load: l, sent: now, id: ref.ID})
	s.schedule(simCallTimeout, simEvent{kind: evTimeout, a: 3, load: l, x: l.call})
}

// onVerdict mirrors applyVerdicts.
func (s *sim) onVerdict(m *simMsg) {
	l := m.load
	if l.state != ldConfirming || l.call != m.call {
		return // a late or second answer
	}
	if m.now != 0 {
		l.dr.off, l.dr.unc = simMeasure(m.sent, s.now(&l.dr.e.clock), m.now)
	}
	if m.why != "" {
		s.end(l, resNotHeld)
		return
	}
	// Invariant 1b: the hold each rank confirmed is the one that was live
	// as the READ from it completed, so no release and new hold (of the
	// same key) came between, even where the bytes happen to be right.
	for i, r := range l.dr.notify {
		if l.seen[r] == nil || l.seen[r] != m.confirmed[i].req {
			s.violateID(l.p.RemoteRequestID, simUncovered, "decode engine %s rank %d: load of %s (%s Params) is done on prefill rank %d's confirmation of a hold that was not the one live as its READ completed (%s)",
				l.dr.e.name, l.dr.j, l.p.RemoteRequestID, l.kind, r, simWhich(l.seen[r]))
		}
	}
	s.done(l)
}

func simWhich(q *simReq) string {
	if q == nil {
		return "none was"
	}
	return "another request's hold of the id was"
}

// covering returns the request whose KV a READ of l's Params from rk
// reads now: the one whose hold is live, or, for blocks read directly, the
// one whose forward pass wrote those very blocks and whose RequestFinished
// on rk has not run yet (the engine owns them; Params may go out after the
// first rank).
func (s *sim) covering(l *simLoad, rk *simRank) *simReq {
	id := l.p.RemoteRequestID
	if hd := rk.held[id]; hd != nil {
		return hd.req
	}
	staged := l.p.RemoteStagingSlot != nil && s.p.staging && !l.direct
	if q := s.p.byID[id]; q != nil && !staged && !q.ranDone[rk.r] && !q.lost[rk.r] && slices.Equal(q.blocks, l.p.RemoteBlockIDs) {
		return q
	}
	return nil
}

// done ends a load as done: invariant 1.
func (s *sim) done(l *simLoad) {
	if l.wrong {
		s.violateID(l.p.RemoteRequestID, simWrongBytes, "decode engine %s rank %d: load of %s (%s Params, blocks %v, slot %v) is done, but what it read is not that request's",
			l.dr.e.name, l.dr.j, l.p.RemoteRequestID, l.kind, l.p.RemoteBlockIDs, simSlot(l.p.RemoteStagingSlot))
	}
	s.end(l, resDone)
}

func simSlot(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}

// end ends a load, exactly once (invariant 3).
func (s *sim) end(l *simLoad, res simResult) {
	if l.state == ldEnded {
		s.violateID(l.p.RemoteRequestID, "load ended twice", "load %d of %s ended %s after it had ended", l.n, l.p.RemoteRequestID, simResultNames[res])
		return
	}
	l.state = ldEnded
	s.liveLoads--
	s.stats.results[res]++
	dr := l.dr
	if i := slices.Index(dr.live, l); i >= 0 {
		dr.live = slices.Delete(dr.live, i, i+1)
	}
	s.trace("end", simResultNames[res], dr.e.idx, dr.j, l.p.RemoteRequestID)
}

func (s *sim) timeout(e simEvent) {
	switch e.a {
	case 1: // handshake
		d := s.d[e.b]
		if d.hs.state != 1 || d.hs.call != e.x {
			return
		}
		d.hs.state = 0
		parked := d.parked
		d.parked = nil
		for _, l := range parked {
			if l.state == ldParked {
				s.end(l, resHandshake)
			}
		}
	case 2: // hold query
		dr := s.d[e.b].ranks[int(e.x>>32)]
		if dr.querying && dr.qcall == e.x&0xffffffff {
			dr.querying = false
		}
	case 3: // confirmation: every error means "not confirmed"
		if l := e.load; l.state == ldConfirming && l.call == e.x {
			s.end(l, resNotHeld)
		}
	}
}

func (s *sim) ensureDTick(dr *simDRank) {
	if !dr.ticking {
		dr.ticking = true
		s.schedule(s.between(500*time.Microsecond, 3*time.Millisecond), simEvent{kind: evDTick, a: dr.e.idx, b: dr.j})
	}
}

// dtick mirrors the reader's tick: READs in flight past the deadline are
// failed, past the transfer timeout too, and heartbeats (NIXL and a hold
// query) go out every interval.
func (s *sim) dtick(dr *simDRank) {
	dr.ticking = false
	now := s.now(&dr.e.clock)
	reading := 0
	for i := 0; i < len(dr.live); i++ {
		l := dr.live[i]
		if l.state != ldReading {
			continue
		}
		if hold, ok := s.holdDeadline(l); ok && !now.Before(hold) && hold.Before(l.deadline) {
			s.end(l, resExpired)
			i--
			continue
		}
		if !now.Before(l.deadline) {
			s.end(l, resTimeout)
			i--
			continue
		}
		reading++
	}
	if reading > 0 && dr.e.hs.state == 2 && now.Sub(dr.lastHB) >= simHBInterval {
		ids := make([]string, 0, reading)
		for _, l := range dr.live {
			if l.state == ldReading {
				ids = append(ids, l.p.RemoteRequestID)
			}
		}
		if !dr.querying {
			s.nextCall++
			dr.querying, dr.qcall = true, s.nextCall
			s.send(&simMsg{kind: mQuery, call: dr.qcall, eng: dr.e.idx, rank: dr.j, agent: dr.agent, ids: ids, sent: now})
			s.schedule(simCallTimeout, simEvent{kind: evTimeout, a: 2, b: dr.e.idx, x: uint64(dr.j)<<32 | dr.qcall})
		}
		for _, r := range dr.notify {
			s.send(&simMsg{kind: mHeartbeat, prank: r, agent: dr.agent, ids: ids, eng: dr.e.idx, rank: dr.j})
		}
		dr.lastHB = now
	}
	if len(dr.confirmed) > 64+4*reading {
		for k := range dr.confirmed {
			if !s.wants(dr, k) {
				delete(dr.confirmed, k)
			}
		}
	}
	if reading > 0 {
		s.ensureDTick(dr)
	}
}

// wants reports whether a live load of dr (or one parked for its engine)
// reads remote request id (Consumer.expected).
func (s *sim) wants(dr *simDRank, id string) bool {
	for _, l := range dr.live {
		if (l.state == ldReading || l.state == ldParked) && l.p.RemoteRequestID == id {
			return true
		}
	}
	return false
}

// onQueryReply mirrors Client.Extend's conversion and applyHoldAnswer.
func (s *sim) onQueryReply(m *simMsg) {
	dr := s.d[m.eng].ranks[m.rank]
	if !dr.querying || dr.qcall != m.call {
		return
	}
	dr.querying = false
	if s.cfg.rules == confirmRules {
		dr.off, dr.unc = simMeasure(m.sent, s.now(&dr.e.clock), m.now)
	}
	remoteNow := time.Unix(0, m.now)
	for i, id := range m.ids {
		ns := m.holds[i]
		if ns <= 0 || !s.wants(dr, id) {
			continue
		}
		d := m.sent.Add(time.Unix(0, ns).Sub(remoteNow))
		if t, ok := dr.confirmed[id]; !ok || d.After(t) {
			dr.confirmed[id] = d
		}
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
// at every step: about 1.5 minutes on one core), GONIXL_SIM_SEED=<n> for
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

// TestSimConfirmRules runs this revision's rules through every attack and
// fault at once: no invariant may break. Every seed runs (a seed stops at
// its first violation) and the first violation of each kind is reported
// with its replayed history. It also checks that the attacks really
// happened and were refused (loads answered "not held"), so that a
// simulation that stopped attacking would fail here.
func TestSimConfirmRules(t *testing.T) {
	seeds, steps, long := simMode(t)
	cfg := simConfig{rules: confirmRules, attacks: atkAll}
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
	t.Logf("confirm rules, all attacks: %d seeds x %d steps: %d violating seeds %v in %v (%.0f steps/s); %v",
		len(seeds), steps, bad, kinds, el.Round(time.Millisecond), float64(total.steps)/el.Seconds(), total)
	for _, v := range first {
		t.Errorf("confirm rules broke an invariant; replay with GONIXL_SIM_SEED=%d\n%s", v.seed, simExplain(v, cfg, steps))
	}
	if total.results[resDone] == 0 || total.results[resNotHeld] == 0 || total.forged == 0 || total.replayed == 0 || total.crashes == 0 || total.retries == 0 {
		t.Fatalf("the simulation did not exercise the protocol: %v", total)
	}
	if total.released[relConfirm] == 0 || total.released[relExpire] == 0 || total.released[relClose] == 0 {
		t.Fatalf("some way of releasing a hold never happened: %v", total)
	}
}

// TestSimAdvertiseMirrorsEngine keeps the simulation's copy of
// Engine.advertise (simPrefill.advertise) honest: both answer a random
// sequence of calls alike.
func TestSimAdvertiseMirrorsEngine(t *testing.T) {
	e, err := NewEngine(EngineConfig{EngineID: "prefill", Model: "m", DType: "bfloat16", TPSize: 2, BlockSize: 16})
	require.NoError(t, err)
	defer e.Close()
	p := &simPrefill{tp: 2, adverts: map[string]*advert{}}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20_000 {
		id := simID(1 + rng.IntN(4))
		now := simEpoch.Add(time.Duration(rng.Int64N(int64(10 * time.Second))))
		own := now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
		require.Equal(t, e.advertise(id, now, own), p.advertise(id, now, own), "call %d: advertise(%s, %v, %v)", i, id, now, own)
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
}

// TestSimFindsLegacyHoles shows that the simulation finds each attack
// class's violation under the legacy rules (so the confirm rules' clean
// runs mean something), and that the seed that found it runs clean under
// the confirm rules.
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
				cfg := simConfig{rules: confirmRules, attacks: a.attacks, prefillTP: a.prefillTP}
				if s := simRun(seed, cfg, steps); s.viol != nil {
					t.Fatalf("confirm rules, %s:\n%s", a.name, simExplain(s.viol, cfg, steps))
				}
			}
		})
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
		{3, simConfig{rules: confirmRules, attacks: atkAll}},
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

// TestSimFindingSlotReusedAfterAFailedGather replays on the real Producers
// and Consumer what the simulation found (invariant 4, then a done result
// with another request's bytes): with ParamsAfterAllRanks, rank 1's gather
// of x fails and gives slot index 0 back; y then takes index 0 on both
// ranks; rank 0's RequestFinished(x) comes last and is handed index 0 by
// the decision rank 1 left behind (slotIndex.byID), so it gathers x into
// rank 0's slot 0 while y holds it. y's Params and keys still match, and
// its load is done with x's bytes in rank 0's part.
func TestSimFindingSlotReusedAfterAFailedGather(t *testing.T) {
	m := newStagingMem(t, StagingOn, 2, 64<<10)
	m.copier["prefill"] = &stagingtest.Copier{FailAt: 1} // the engine's first gather: rank 1's of x
	c := stagedCluster(t, clusterOpts{prefill: side{2, 16},
		prefillCfg: func(rc *RankConfig) { rc.ParamsAfterAllRanks = true }}, m)
	xb, yb := []int{1}, []int{2}
	c.fill(1, xb, 16)
	c.fill(2, yb, 16)
	_, err := c.prods[1].RequestFinished("x", xb)
	require.ErrorIs(t, err, ErrStaging)
	py := c.finish("y", yb)
	require.NotNil(t, py.RemoteStagingSlot)
	_, err = c.prods[0].RequestFinished("x", xb)
	require.NoError(t, err)
	c.load("dy", py, []int{5})
	require.NoError(t, c.notDoneOrRight(c.result("dy")[0], 2, []int{5}, 16), "y is still held as its Params say")
}

// TestSimFindingHoldKeyReusedByALaterHold checks, on the real Producers,
// what holdKey's confirmations rest on: a later hold of the same id does
// not get the key of an earlier one. Rank 1's gather of r fails, so only
// rank 0 took the engine's advert of r (Engine.advertise); decode's
// confirmation releases rank 0's hold; the engine finishes r again (a
// retry with the same id) in the same block and slot before the first
// deadline, and rank 0 inherits the advert's deadline — the same key. A
// confirmation sent for the first hold, by a reader whose READ ran while
// block 1 was free, would then be answered "" for the second.
func TestSimFindingHoldKeyReusedByALaterHold(t *testing.T) {
	m := newStagingMem(t, StagingOn, 2, 64<<10)
	m.copier["prefill"] = &stagingtest.Copier{FailAt: 2} // rank 1's gather of the first r
	c := stagedCluster(t, clusterOpts{prefill: side{2, 16},
		prefillCfg: func(rc *RankConfig) { rc.ParamsAfterAllRanks = true }}, m)
	c.fill(1, []int{1}, 16)
	p1, err := c.prods[0].RequestFinished("r", []int{1})
	require.NoError(t, err)
	_, err = c.prods[1].RequestFinished("r", []int{1})
	require.ErrorIs(t, err, ErrStaging)
	c.load("d1", p1, []int{5})
	require.ErrorIs(t, c.result("d1")[0].Err, ErrNotHeld, "rank 1 holds nothing")
	for deadline := time.Now().Add(5 * time.Second); c.prods[0].Held() != 0; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "rank 0 never released the first hold")
	}
	p2, err := c.prods[0].RequestFinished("r", []int{1})
	require.NoError(t, err)
	ref := handshake.HoldRef{ID: "r", Key: p1.holdKey(), N: 2, Ranks: []int{0}}
	verdict := c.pe.confirm("decode-b", "decode-b-agent-0", []handshake.HoldRef{ref})
	require.NotEqual(t, p1.holdKey(), p2.holdKey(), "the second hold of r has the first one's key (deadline %v, slot %s both times); a confirmation of the first is answered %q",
		p2.RemoteBlocksExpiryTime, simSlot(p2.RemoteStagingSlot), verdict[0])
}
