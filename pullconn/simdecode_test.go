package pullconn

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/nixl"
)

// The decode side of the pull simulation. Every decode rank is the
// production reader (reader.go), the core of a Consumer, with the
// Consumer's readGuard: the simulation is its shell, as the Consumer is in
// production. It keeps the queue and the answers the next tick feeds the
// reader (Consumer.tick), starts the side-channel calls the reader asks for
// as messages on the simulated network (a handshake, a hold query, a pin,
// each with its client's timeout), and is the reader's agent: a READ's
// remote descriptors name the prefill blocks it reads (by address, on
// prefill's layout), it completes after a drawn time, and its notification
// (a completion, under the legacy rules) or a GenNotif reaches prefill as
// a NIXL notification. The ledger beside each load (simLoad) only records
// what the invariants need; the reader decides everything.

// Decode and prefill ranks share a layout shape: one layer (K and V
// regions) of simHeads KV heads over the engine's TP ranks, simBlocks
// blocks of simBlockTokens tokens.
const (
	simHeads       = 2
	simHeadBytes   = 8
	simBlockTokens = 16
)

// simLayout is rank r's layout in an engine of TP tp; base places its
// regions.
func simLayout(r, tp int, base uint64) descriptors.Layout {
	l := descriptors.Layout{Mem: nixl.DRAM, NumLayers: 1, NumBlocks: simBlocks, BlockSize: simBlockTokens,
		KVHeads: simHeads / tp, HeadBytes: simHeadBytes, DType: "bfloat16", TPRank: r, TPSize: tp}
	for i := 0; i < l.NumRegions(); i++ {
		l.Regions = append(l.Regions, descriptors.Region{Base: base + uint64(i)*l.RegionLen()})
	}
	return l
}

// simPrefillBase is where prefill rank r's regions start, and
// simSlotBase where its staging slots (simSlotBytes each) do.
func simPrefillBase(r int) uint64 { return uint64(r+1) << 32 }

func simSlotBase(r int) uint64 { return simPrefillBase(r) + 1<<30 }

// simSlotBytes is a prefill staging slot's size (the slotIndex's
// configuration in the simulation).
const simSlotBytes = 1 << 20

// simDecodeSlots is how many staging slots a staging decode rank has: a
// busy rank reads some staged requests' blocks directly, for want of one.
const simDecodeSlots = 2

// simCopier is a decode rank's staging copier: the simulation follows
// prefill's memory only, so the scatter out of a slot copies nothing.
type simCopier struct{}

func (simCopier) Copy([]staging.Seg) error { return nil }

// simAgentName is prefill rank r's agent in incarnation inc.
func simAgentName(r, inc int) string { return "prefill-" + strconv.Itoa(r) + "-" + strconv.Itoa(inc) }

func simParseAgent(name string) (r, inc int, ok bool) {
	rest, found := strings.CutPrefix(name, "prefill-")
	a, b, found2 := strings.Cut(rest, "-")
	if !found || !found2 {
		return 0, 0, false
	}
	r, err1 := strconv.Atoi(a)
	inc, err2 := strconv.Atoi(b)
	return r, inc, err1 == nil && err2 == nil
}

// simDecode is one decode engine: its clocks and its ranks.
type simDecode struct {
	idx   int
	name  string
	tp    int
	clock simClock
	mono  simMono
	ranks []*simDRank
}

// simDRank is one decode rank: a production reader and readGuard, and the
// shell the simulation runs them in.
type simDRank struct {
	e      *simDecode
	j      int
	agent  string
	notify []int
	cfg    rankConfig
	rd     *reader
	guard  readGuard
	// The shell's inbox for the next tick (Consumer.queue, hsDone,
	// queried).
	queue   []*load
	hsDone  []handshakeDone
	queried []holdAnswer
	// live are the loads not ended, in the order they came; byLoad finds
	// a reader's load's ledger.
	live    []*simLoad
	byLoad  map[*load]*simLoad
	calls   map[uint64]*simCall
	ticking bool
	// pausedUntil: the rank handles nothing before then (true time).
	pausedUntil time.Duration
}

// simCall is a side-channel call in flight.
type simCall struct {
	kind  simMsgKind
	r     *remote
	sent  time.Time
	loads []*load // a pin's
}

// simLoad is the ledger of one reader load.
type simLoad struct {
	n     int
	dr    *simDRank
	l     *load
	p     *Params
	truth int // the content id of the request the Params name
	kind  string
	wrong bool
	ended bool
	// seen is, by prefill rank, the request whose KV the READ from that
	// rank read as it completed: the one whose hold was live then, or, for
	// blocks read directly, the one whose forward pass wrote them and whose
	// RequestFinished on that rank is still to come (nil: neither).
	// readMono is that rank's monotonic clock then (for 1c).
	seen     []*simReq
	readMono []time.Time
	// pinned and pinUntil are, by rank it notifies, the hold that prefill
	// rank pinned and the end of the pin, from the verdict the reader took.
	pinned   []*simHold
	pinUntil []time.Time
}

// simXfer is one READ the reader created on its simulated agent.
type simXfer struct {
	prank, inc int
	blocks     []int  // the prefill blocks its remote descriptors cover
	slots      []int  // and the prefill staging slots
	msg        []byte // the notification it carries, nil none
	agent      string // the decode rank's
	eng, rank  int
	sl         *simLoad // bound once the reader's call returned
	state      uint8    // 0 created, 1 in flight, 2 done, 3 failed
}

func (s *sim) newDecode(idx, tp int) *simDecode {
	e := &simDecode{idx: idx, name: "decode-" + string(rune('a'+idx)), tp: tp}
	if s.cfg.rules == pinRules {
		e.mono = s.newMono()
	}
	for j := range tp {
		notify, err := notifyRanks(j, tp, s.p.tp)
		if err != nil {
			panic(err)
		}
		dr := &simDRank{e: e, j: j, agent: e.name + "/" + strconv.Itoa(j), notify: notify, guard: s.newGuard(),
			byLoad: map[*load]*simLoad{}, calls: map[uint64]*simCall{}}
		dr.cfg.Layout = simLayout(j, tp, uint64(idx+1)<<40)
		dr.cfg.TransferTimeout, dr.cfg.ExpiryMargin, dr.cfg.KeepAliveTimeout = simTransferTimeout, simMargin, simKeepAlive
		dr.cfg.HeartbeatInterval, dr.cfg.EngineTTL = simHBInterval, -1
		if s.p.staging {
			// Engine a reads a staged request's slot in one READ per
			// prefill rank, engine b in two chunks, each scattered once read.
			dr.cfg.Staging = staging.Config{Mode: staging.ModeOn, Mem: nixl.DRAM, Base: uint64(idx+1)<<40 + 1<<36 + uint64(j)<<32,
				SlotBytes: 64 << 10, Slots: simDecodeSlots, Copier: simCopier{}, Chunks: 1 + idx}
		}
		st := stats.New()
		rd := newReader(&dr.cfg, &simAgent{s: s, dr: dr}, &simShell{s: s, dr: dr}, zap.NewNop(), st)
		rd.now = func() time.Time { return s.now(&e.clock) }
		rd.mono = func() time.Time { return s.mono(&e.mono) }
		rd.steady = rd.mono
		rd.hsTimeout = simHSTimeout
		rd.stuck, rd.holdQueries, rd.failedQueries = st.Counter("stuck", ""), st.Counter("hq", ""), st.Counter("fq", "")
		rd.eng.forgotten, rd.eng.regenerations = st.Counter("fe", ""), st.Counter("rg", "")
		rd.restart.count, rd.pins.notHeld = st.Counter("rs", ""), st.Counter("nh", "")
		if s.cfg.rules == legacyRules {
			rd.rules.handshakeClock = true
		}
		switch s.cfg.mutant {
		case mutNoPinWindow:
			rd.rules.noPinWindow = true
		case mutShortPin:
			rd.rules.shortPin = simTransferTimeout - 3*simMargin
		}
		if s.p.staging {
			c := &dr.cfg.Staging
			rd.stage.pool = staging.NewPool(c.Base, c.SlotBytes, c.Slots)
			rd.stage.stage, rd.stage.model, rd.stage.readiness = staging.NewCounters(st), staging.NewModel(c), newReadyCounters(st)
		}
		dr.rd = rd
		e.ranks = append(e.ranks, dr)
	}
	return e
}

// newGuard is a decode rank's readGuard; under the legacy rules it keys a
// read remote request by its id alone, as b6a750d did.
func (s *sim) newGuard() readGuard {
	g := newReadGuard(stats.New().Counter("read_guards_forgotten", ""))
	g.byID = s.cfg.rules == legacyRules
	return g
}

// deliver is Consumer.Load on every rank of a decode engine, under a new
// decode request id each time: refused by the readGuard while the rank
// loads that remote request, or read it and its guard has not run out;
// else queued for the reader's next tick.
func (s *sim) deliver(del *simDelivery) {
	if s.viol != nil {
		return
	}
	e := s.d[del.eng]
	s.trace("load", del.kind, e.idx, 0, del.p.RemoteRequestID)
	if err := del.p.Validate(); err != nil {
		s.violate("model", "Params of %s (%s) are not valid (Load refuses them): %v", del.p.RemoteRequestID, del.kind, err)
		return
	}
	for _, dr := range e.ranks {
		p := *del.p
		p.RemoteBlockIDs = slices.Clone(p.RemoteBlockIDs)
		local := make([]int, len(p.RemoteBlockIDs))
		for i := range local {
			local[i] = i
		}
		l := &load{id: "d" + strconv.Itoa(s.nextLoad+1), p: p, local: local, key: "prefill@127.0.0.1:5600", hold: p.holdKey()}
		now := s.now(&e.clock)
		if err := dr.guard.check(l.id, l, now); err != nil {
			s.stats.refused++
			s.trace("load-refused", simRefusal(err), e.idx, dr.j, p.RemoteRequestID)
			continue
		}
		dr.guard.start(l.id, l)
		l.start = now
		s.nextLoad++
		sl := &simLoad{n: s.nextLoad, dr: dr, l: l, p: del.p, truth: del.truth, kind: del.kind,
			seen: make([]*simReq, s.p.tp), readMono: make([]time.Time, s.p.tp)}
		dr.live = append(dr.live, sl)
		dr.byLoad[l] = sl
		s.liveLoads++
		s.stats.loads++
		dr.queue = append(dr.queue, l)
		s.wake(dr)
	}
}

// simRefusal names why the guard refused a load, for the trace.
func simRefusal(err error) string {
	if strings.Contains(err.Error(), "already loading") {
		return "loading"
	}
	return "read"
}

// wake is the poller's Wake: the rank ticks soon.
func (s *sim) wake(dr *simDRank) {
	if !dr.ticking {
		dr.ticking = true
		s.schedule(s.between(50*time.Microsecond, time.Millisecond), simEvent{kind: evDTick, a: dr.e.idx, b: dr.j})
	}
}

// dtick is Consumer.tick: the queue and the answers since the last tick,
// fed to the reader. The rank keeps ticking while it has live loads.
func (s *sim) dtick(dr *simDRank) {
	dr.ticking = false
	queued, done, answers := dr.queue, dr.hsDone, dr.queried
	dr.queue, dr.hsDone, dr.queried = nil, nil, nil
	dr.rd.tick(queued, done, answers, nil)
	s.bind(dr)
	if len(dr.live) > 0 && !dr.ticking {
		dr.ticking = true
		s.schedule(s.between(500*time.Microsecond, 3*time.Millisecond), simEvent{kind: evDTick, a: dr.e.idx, b: dr.j})
	}
}

// bind ties the READs the reader posted in its last call to their loads,
// and checks what they read as they are posted.
func (s *sim) bind(dr *simDRank) {
	for _, sl := range dr.live {
		for _, x := range sl.l.xfers {
			if x.h == 0 {
				continue
			}
			if sx := s.xfers[x.h]; sx != nil && sx.sl == nil {
				sx.sl = sl
				s.stats.reads++
				if len(sx.slots) > 0 {
					s.stats.staged++
					if x.part || len(sl.l.xfers) > len(dr.notify) {
						s.stats.chunked++
					}
				}
				s.trace("post", "", dr.e.idx, sx.prank, sl.p.RemoteRequestID)
				s.copyCheck(sl, sx)
			}
		}
	}
}

// copyCheck compares what a READ reads now with the request's bytes. It
// runs as the READ is posted and as it completes: a real READ copies at
// some moment in between, and a block rewritten in between is rewritten
// at one end or the other unless it was rewritten back (then (1b) still
// sees the READ outside the hold).
func (s *sim) copyCheck(sl *simLoad, x *simXfer) {
	rk := s.p.ranks[x.prank]
	want := simTag(sl.truth, x.prank)
	for _, b := range x.blocks {
		if rk.blocks[b] != want {
			sl.wrong = true
		}
	}
	for _, i := range x.slots {
		if rk.slotMem[i] != want {
			sl.wrong = true
		}
	}
}

// abortLoad is Consumer.Abort of a live load of dr.
func (s *sim) abortLoad(dr *simDRank, sl *simLoad) {
	err := fmt.Errorf("%w: request %q", errAborted, sl.l.id)
	if i := slices.Index(dr.queue, sl.l); i >= 0 {
		dr.queue = slices.Delete(dr.queue, i, i+1)
		dr.rd.fail(sl.l, err)
		return
	}
	if l := dr.rd.findLoad(sl.l.id); l != nil {
		dr.rd.fail(l, err)
	}
}

// readDone is a READ completing: it copies what the blocks hold now.
// Under the legacy rules it also delivers the completion it carries,
// whatever became of the load. The decode rank sees it at its next tick.
func (s *sim) readDone(x *simXfer) {
	s.readsInFlight--
	rk := s.p.ranks[x.prank]
	ok := rk.up && rk.inc == x.inc
	x.state = 3
	if ok {
		x.state = 2
	}
	id := ""
	if sl := x.sl; sl != nil {
		id = sl.p.RemoteRequestID
		if ok && !sl.ended {
			s.copyCheck(sl, x)
			sl.seen[x.prank] = s.covering(sl, rk, len(x.slots) > 0)
			sl.readMono[x.prank] = s.mono(&rk.mono)
		}
	}
	s.trace("read-done", simResultOK(ok), x.eng, x.prank, id)
	if ok && x.msg != nil {
		c, err := notif.DecodeSeqCompletion(x.msg)
		if err != nil {
			s.violate("model", "READ notification %q: %v", x.msg, err)
			return
		}
		m := &simMsg{kind: mCompletion, prank: x.prank, agent: x.agent, id: c.ID, n: c.N, seq: c.Seq, eng: x.eng, rank: x.rank}
		s.noteCompletion(m)
		s.send(m)
	}
	s.wake(s.d[x.eng].ranks[x.rank])
}

func simResultOK(ok bool) string {
	if ok {
		return "ok"
	}
	return "failed"
}

// covering returns the request whose KV a READ of sl's Params from rk
// reads now: the one whose hold is live, or, for blocks read directly (not
// staged), the one whose forward pass wrote those very blocks and whose
// RequestFinished on rk has not run yet (the engine owns them; Params may
// go out after the first rank).
func (s *sim) covering(sl *simLoad, rk *simRank, staged bool) *simReq {
	id := sl.p.RemoteRequestID
	if hd := rk.held[id]; hd != nil {
		return hd.req
	}
	if q := s.p.byID[id]; q != nil && !staged && !q.ranDone[rk.r] && !q.lost[rk.r] && slices.Equal(q.blocks, sl.p.RemoteBlockIDs) {
		return q
	}
	return nil
}

// published is the reader's result: the load ends, exactly once
// (invariant 3); a done one must have read its request's bytes (1) and,
// under the pin rules, done so under the hold each rank pinned (1b) and
// within the pin (1c). Then Consumer.published: the guard learns the end.
func (s *sim) published(dr *simDRank, l *load) {
	sl := dr.byLoad[l]
	if sl == nil || sl.ended {
		s.violate("load ended twice", "load %s of %s was published after it had ended", l.id, l.p.RemoteRequestID)
		return
	}
	sl.ended = true
	delete(dr.byLoad, l)
	if i := slices.Index(dr.live, sl); i >= 0 {
		dr.live = slices.Delete(dr.live, i, i+1)
	}
	s.liveLoads--
	res := simResultOf(l.result.Err)
	s.stats.results[res]++
	if l.retried {
		s.stats.retried++
	}
	if res == resNotHeld && !l.readsEnded.IsZero() && l.readsEnded.After(l.pinSent.Add(simTransferTimeout)) {
		s.stats.outlasted++
	}
	s.trace("end", simResultNames[res], dr.e.idx, dr.j, l.p.RemoteRequestID)
	if res == resDone {
		s.checkDone(sl)
	}
	dr.guard.ended(l, l.result.End)
}

// checkDone checks a done load: invariants 1, 1b and 1c.
func (s *sim) checkDone(sl *simLoad) {
	dr, l := sl.dr, sl.l
	if sl.wrong {
		s.violateID(l.p.RemoteRequestID, simWrongBytes, "decode engine %s rank %d: load of %s (%s Params, blocks %v, slot %v) is done, but what it read is not that request's",
			dr.e.name, dr.j, l.p.RemoteRequestID, sl.kind, l.p.RemoteBlockIDs, simSlot(l.p.RemoteStagingSlot))
	}
	if s.cfg.rules != pinRules {
		return
	}
	for i, r := range dr.notify {
		var pinned *simReq
		if sl.pinned != nil && sl.pinned[i] != nil {
			pinned = sl.pinned[i].req
		}
		// 1b: the hold each rank pinned is the one that was live as the
		// READ from it completed, so no release and new hold came
		// between, even where the bytes happen to be right.
		if sl.seen[r] == nil || sl.seen[r] != pinned {
			s.violateID(l.p.RemoteRequestID, simUncovered, "decode engine %s rank %d: load of %s (%s Params) is done on prefill rank %d's pin of a hold that was not the one live as its READ completed (%s)",
				dr.e.name, dr.j, l.p.RemoteRequestID, sl.kind, r, simWhich(sl.seen[r]))
			return
		}
		// 1c: a READ that ended after the pin was granted ended before
		// the pin ran out, on that rank's monotonic clock.
		if sl.readMono[r].After(sl.pinUntil[i]) {
			s.violateID(l.p.RemoteRequestID, simOutlasted, "decode engine %s rank %d: load of %s is done, but its READ from prefill rank %d ended at %v on that rank's monotonic clock, after the pin it granted ran out (%v)",
				dr.e.name, dr.j, l.p.RemoteRequestID, r, sl.readMono[r], sl.pinUntil[i])
		}
	}
}

func simWhich(q *simReq) string {
	if q == nil {
		return "none was"
	}
	return "another request's hold of the id was"
}

func simSlot(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}

// simResultOf classes a load's end by its error.
func simResultOf(err error) simResult {
	switch {
	case err == nil:
		return resDone
	case errors.Is(err, ErrExpired):
		return resExpired
	case errors.Is(err, ErrNotHeld):
		return resNotHeld
	case errors.Is(err, ErrTimeout):
		return resTimeout
	case errors.Is(err, errAborted):
		return resAborted
	case errors.Is(err, connector.ErrHandshake):
		return resHandshake
	}
	return resTransfer // ErrTransfer, ErrPrefillGone, a TP size the engine does not have
}

// ---- the side channel ----

func (s *sim) newCall(dr *simDRank, c *simCall) uint64 {
	s.nextCall++
	dr.calls[s.nextCall] = c
	return s.nextCall
}

// timeoutAt schedules the client's timeout of a call of dr.
func (s *sim) timeoutAt(d time.Duration, dr *simDRank, call uint64) {
	s.schedule(d, simEvent{kind: evTimeout, a: dr.e.idx, b: dr.j, x: call})
}

// callTimeout is a call's client giving up: a handshake fails, a hold
// query fails (the loads keep their deadlines), a pin's every load is
// "not held".
func (s *sim) callTimeout(dr *simDRank, call uint64) {
	c := dr.calls[call]
	if c == nil {
		return
	}
	delete(dr.calls, call)
	err := fmt.Errorf("%w: simulated call timed out", connector.ErrHandshake)
	switch c.kind {
	case mHello:
		dr.hsDone = append(dr.hsDone, handshakeDone{r: c.r, err: err})
	case mQuery:
		dr.queried = append(dr.queried, holdAnswer{r: c.r, err: err})
	case mPin:
		dr.rd.pins.applyVerdicts(verdicts{r: c.r, loads: c.loads, err: err})
	}
	s.wake(dr)
}

// onHelloReply is Client.Get's answer: the payload, the engine's clock
// offset measured over the call, paired with the rank's layout
// (Consumer.connect), for the next tick.
func (s *sim) onHelloReply(m *simMsg) {
	dr := s.d[m.eng].ranks[m.rank]
	c := dr.calls[m.call]
	if c == nil {
		return
	}
	if m.retry {
		// The client asks again after 20 ms, within its timeout.
		s.schedule(20*time.Millisecond, simEvent{kind: evMsg, msg: &simMsg{kind: mHello, call: m.call, eng: m.eng, rank: m.rank, sent: c.sent}})
		return
	}
	delete(dr.calls, m.call)
	off, unc := simMeasure(c.sent, s.now(&dr.e.clock), m.now)
	pl := &handshake.Payload{EngineID: "prefill", TPSize: s.p.tp, BlockSize: simBlockTokens, Confirms: s.cfg.rules == pinRules,
		ClockOffset: off, ClockUncertainty: unc}
	for r, inc := range m.inc {
		rank := handshake.Rank{TPRank: r, Agent: simAgentName(r, inc), Layout: simLayout(r, s.p.tp, simPrefillBase(r)), Incarnation: uint64(inc + 1)}
		if s.p.staging {
			rank.Staging = &staging.Info{Base: simSlotBase(r), SlotBytes: simSlotBytes, Slots: simSlots}
		}
		pl.Ranks = append(pl.Ranks, rank)
	}
	set, err := pair(pl, &dr.cfg.Layout)
	if err == nil {
		for _, r := range set.notify {
			set.agents[r] = pl.Ranks[r].Agent
		}
	}
	dr.hsDone = append(dr.hsDone, handshakeDone{r: c.r, set: set, err: err})
	s.wake(dr)
}

// simMeasure mirrors handshake.measure.
func simMeasure(sent, got time.Time, remoteNow int64) (off, unc time.Duration) {
	mid := sent.Add(got.Sub(sent) / 2)
	return time.Unix(0, remoteNow).Sub(mid), got.Sub(sent)/2 + time.Microsecond
}

// onQueryReply is Client.Extend's answer, its deadlines converted to the
// rank's clock, for the next tick.
func (s *sim) onQueryReply(m *simMsg) {
	dr := s.d[m.eng].ranks[m.rank]
	c := dr.calls[m.call]
	if c == nil {
		return
	}
	delete(dr.calls, m.call)
	off, unc := simMeasure(c.sent, s.now(&dr.e.clock), m.now)
	remoteNow := time.Unix(0, m.now)
	ans := holdAnswer{r: c.r, ids: m.ids, deadlines: make([]time.Time, len(m.ids)), clock: handshake.Clock{Offset: off, Uncertainty: unc}}
	for i, ns := range m.holds {
		if ns > 0 {
			ans.deadlines[i] = c.sent.Add(time.Unix(0, ns).Sub(remoteNow))
		}
	}
	dr.queried = append(dr.queried, ans)
	s.wake(dr)
}

// onVerdict is Client.Confirm's answer, applied at once as Consumer.runPin
// does; the ledger notes what each rank pinned first.
func (s *sim) onVerdict(m *simMsg) {
	dr := s.d[m.eng].ranks[m.rank]
	c := dr.calls[m.call]
	if c == nil {
		return // timed out, or a second copy of the answer
	}
	delete(dr.calls, m.call)
	for i, l := range c.loads {
		sl := dr.byLoad[l]
		if sl == nil || m.whys[i] != "" {
			continue
		}
		sl.pinned, sl.pinUntil = m.pinned[i], m.until[i]
		if _, late := dr.rd.pins.awaitingPin[l]; late {
			s.stats.pinsLate++
		}
	}
	off, unc := simMeasure(c.sent, s.now(&dr.e.clock), m.now)
	dr.rd.pins.applyVerdicts(verdicts{r: c.r, loads: c.loads, why: m.whys, clock: handshake.Clock{Offset: off, Uncertainty: unc}})
	s.bind(dr)
	s.wake(dr)
}

// simShell is a decode rank's edges: the simulation's side channel and
// engine-facing state.
type simShell struct {
	s  *sim
	dr *simDRank
}

func (e *simShell) handshake(r *remote) bool {
	s, dr := e.s, e.dr
	now := s.now(&dr.e.clock)
	call := s.newCall(dr, &simCall{kind: mHello, r: r, sent: now})
	s.send(&simMsg{kind: mHello, call: call, eng: dr.e.idx, rank: dr.j, sent: now})
	s.timeoutAt(simHSTimeout, dr, call)
	return true
}

func (e *simShell) queryHolds(r *remote, ids []string) bool {
	s, dr := e.s, e.dr
	now := s.now(&dr.e.clock)
	call := s.newCall(dr, &simCall{kind: mQuery, r: r, sent: now})
	s.send(&simMsg{kind: mQuery, call: call, eng: dr.e.idx, rank: dr.j, agent: dr.agent, ids: ids, sent: now})
	s.timeoutAt(simCallTimeout, dr, call)
	return true
}

func (e *simShell) confirm(r *remote, loads []*load, refs []handshake.HoldRef) bool {
	s, dr := e.s, e.dr
	now := s.now(&dr.e.clock)
	call := s.newCall(dr, &simCall{kind: mPin, r: r, sent: now, loads: loads})
	s.stats.pins += len(refs)
	s.sendPinMsg(&simMsg{kind: mPin, call: call, eng: dr.e.idx, rank: dr.j, agent: dr.agent, refs: refs, sent: now, id: refs[0].ID})
	s.timeoutAt(simPinTimeout, dr, call)
	return true
}

func (e *simShell) queryReady(*load, handshake.ReadyQuery) bool {
	e.s.violate("model", "a readiness query: decode ranks stage nothing here")
	return false
}

func (e *simShell) forget(*remote) {}
func (e *simShell) isClosed() bool { return false }
func (e *simShell) published(l *load) {
	e.s.published(e.dr, l)
}
func (e *simShell) keepAlives(time.Time) []*Params { return nil }
func (e *simShell) kept() []*Params                { return nil }
func (e *simShell) dropKeepAlives(string, error)   {}
func (e *simShell) refers(key string) bool {
	for _, l := range e.dr.queue {
		if l.key == key {
			return true
		}
	}
	return false
}
func (e *simShell) takeReadied() []readyAnswer { return nil }

// simAgent is a decode rank's NIXL agent (the reader's transfers).
type simAgent struct {
	s  *sim
	dr *simDRank
}

func (a *simAgent) CreateXferReq(op nixl.XferOp, local, remote nixl.XferList, agent string, opts *nixl.Options) (nixl.XferHandle, error) {
	s := a.s
	r, inc, ok := simParseAgent(agent)
	if !ok || op != nixl.Read {
		s.violate("model", "a transfer %v to agent %q", op, agent)
		return 0, nixl.ErrInvalidParam
	}
	if rk := s.p.ranks[r]; !rk.up || rk.inc != inc {
		// The agent this handshake loaded is gone.
		return 0, nixl.ErrRemoteDisconnect
	}
	x := &simXfer{prank: r, inc: inc, agent: a.dr.agent, eng: a.dr.e.idx, rank: a.dr.j}
	lay := simLayout(r, s.p.tp, simPrefillBase(r))
	for _, d := range remote.Descs {
		if base := simSlotBase(r); d.Addr >= base && d.Addr < base+simSlots*simSlotBytes {
			if i := int((d.Addr - base) / simSlotBytes); !slices.Contains(x.slots, i) {
				x.slots = append(x.slots, i)
			}
			continue
		}
		for _, reg := range lay.Regions {
			if d.Addr < reg.Base || d.Addr >= reg.Base+lay.RegionLen() {
				continue
			}
			first := int((d.Addr - reg.Base) / lay.BlockLen())
			last := int((d.Addr + d.Len - 1 - reg.Base) / lay.BlockLen())
			for b := first; b <= last; b++ {
				if !slices.Contains(x.blocks, b) {
					x.blocks = append(x.blocks, b)
				}
			}
		}
	}
	if opts != nil && opts.Notif != nil {
		x.msg = slices.Clone(opts.Notif)
	}
	s.nextXfer++
	h := nixl.XferHandle(s.nextXfer)
	s.xfers[h] = x
	return h, nil
}

func (a *simAgent) PostXferReq(h nixl.XferHandle, _ *nixl.Options) (nixl.Status, error) {
	s := a.s
	x := s.xfers[h]
	if x == nil || x.state != 0 {
		s.violate("model", "PostXferReq of a transfer not created or posted twice")
		return 0, nixl.ErrInvalidParam
	}
	x.state = 1
	s.readsInFlight++
	s.schedule(s.readTime(), simEvent{kind: evRead, xfer: x})
	return nixl.StatusInProgress, nil
}

func (a *simAgent) XferStatus(h nixl.XferHandle) (nixl.Status, error) {
	x := a.s.xfers[h]
	switch {
	case x == nil:
		return 0, nixl.ErrNotFound
	case x.state == 2:
		return nixl.StatusSuccess, nil
	case x.state == 3:
		return 0, nixl.ErrRemoteDisconnect
	}
	return nixl.StatusInProgress, nil
}

// ReleaseXferReqs lets go of READs at once, in flight or not: the
// simulation does not follow decode's blocks (a READ in flight finishes
// for prefill's sake, its completion included).
func (a *simAgent) ReleaseXferReqs(hs []nixl.XferHandle, errs []error) error {
	for i, h := range hs {
		if _, ok := a.s.xfers[h]; !ok {
			errs[i] = nixl.ErrNotFound
			continue
		}
		delete(a.s.xfers, h)
	}
	return nil
}

// GenNotif sends a heartbeat or a keyed completion to a prefill rank.
func (a *simAgent) GenNotif(agent string, msg []byte, _ *nixl.Options) error {
	s, dr := a.s, a.dr
	r, _, ok := simParseAgent(agent)
	if !ok {
		s.violate("model", "a notification to agent %q", agent)
		return nixl.ErrInvalidParam
	}
	if notif.IsHeartbeat(msg) {
		ids, err := notif.DecodeHeartbeat(msg)
		if err != nil {
			s.violate("model", "heartbeat %q: %v", msg, err)
			return err
		}
		s.send(&simMsg{kind: mHeartbeat, prank: r, agent: dr.agent, ids: ids, eng: dr.e.idx, rank: dr.j})
		return nil
	}
	c, err := notif.DecodeSeqCompletion(msg)
	if err != nil {
		s.violate("model", "completion %q: %v", msg, err)
		return err
	}
	m := &simMsg{kind: mCompletion, prank: r, agent: dr.agent, id: c.ID, n: c.N, seq: c.Seq, eng: dr.e.idx, rank: dr.j}
	s.noteCompletion(m)
	s.send(m)
	return nil
}

func (a *simAgent) InvalidateRemoteMD(string) error { return nil }
