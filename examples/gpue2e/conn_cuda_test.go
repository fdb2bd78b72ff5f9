//go:build nixl && cuda

package gpue2e

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/latency"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn"
)

// The connector runs put a prefill engine (one TP rank, this process, GPU
// 0) and a decode engine (one TP rank, a peer process, GPU 0 or 1) around
// the same Qwen3-32B-like KV cache as BenchmarkKV, 2048 blocks a side, and
// 2k-token requests (128 blocks, 512 MiB of KV each). Blocks are handed out
// in slots of one request; a request's blocks are a slot's, in order
// (contiguous) or shuffled (fragmented). Decode checks the bytes of every
// request, then zeroes its blocks, so a request that moved nothing cannot
// pass on what an earlier one left behind.
type connGeometry struct {
	layers, blocks, reqBlocks int
	// frag is how a fragmented request's blocks lie: "full" (shuffled, no
	// two adjacent, the default) or "half" (runs of 2 to 8 blocks in
	// shuffled order).
	frag string
}

// connGeom is the geometry above; GONIXL_E2E_REQ_BLOCKS sets the blocks
// of one request (1024: a 16k-token request of 4 GiB).
func connGeom() connGeometry {
	g := connGeometry{layers: 64, blocks: 2048, reqBlocks: 128}
	if useDRAM() {
		g = connGeometry{layers: 2, blocks: 64, reqBlocks: 8}
	}
	g.reqBlocks = envInt("GONIXL_E2E_REQ_BLOCKS", g.reqBlocks)
	return g
}

const (
	modelName   = "qwen3-32b-like"
	prefillSeed = 42
)

// pollInterval lets a run set both connectors' polling period
// (GONIXL_E2E_POLL, a Go duration); zero keeps their defaults.
func pollInterval() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("GONIXL_E2E_POLL"))
	return d
}

// slotBlocks returns slot s's blocks, shuffled with seed when fragmented.
func slotBlocks(g connGeometry, s int, fragmented bool, seed uint64) []int {
	b := make([]int, g.reqBlocks)
	for i := range b {
		b[i] = s*g.reqBlocks + i
	}
	if !fragmented {
		return b
	}
	rng := rand.New(rand.NewPCG(seed, uint64(s)))
	if g.frag != "half" {
		rng.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
		return b
	}
	var runs [][]int
	for len(b) > 0 {
		n := min(len(b), 2+rng.IntN(7))
		runs, b = append(runs, b[:n]), b[n:]
	}
	rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	return slices.Concat(runs...)
}

// Messages between the prefill process and a "decode" peer.
type (
	decodeHello struct {
		Agent string `json:"agent"`
	}
	// loadMsg starts a request on decode: Load (pull) or Register (push).
	loadMsg struct {
		ID        string           `json:"id"`
		Pull      *pullconn.Params `json:"pull,omitempty"`
		Push      pushconn.Prefill `json:"push"`
		Blocks    []int            `json:"blocks"`
		SrcBlocks []int            `json:"src_blocks"`
		Full      bool             `json:"full"`
		// Seq picks the blocks a sampled check looks at.
		Seq int `json:"seq"`
		// recv is when decode received it (not sent).
		recv int64
	}
	// doneMsg is a request's end on decode: when (wall clock), how, and
	// what the byte check found.
	doneMsg struct {
		ID      string `json:"id"`
		EndNano int64  `json:"end"`
		Err     string `json:"err,omitempty"`
		Checked uint64 `json:"checked"`
		// RecvNano is when decode received the request's load message.
		RecvNano int64 `json:"recv"`
		// Stage is decode's staging counters (cumulative) when it ended.
		Stage map[string]uint64 `json:"stage,omitempty"`
		// Decode's cumulative transfer and post times (pull's READs)
		// when it ended, and how many NIXL's telemetry timed.
		XferNS int64  `json:"xfer_ns"`
		Xfers  uint64 `json:"xfers"`
		PostNS int64  `json:"post_ns"`
		Posts  uint64 `json:"posts"`
		ByNIXL uint64 `json:"by_nixl"`
		// Pull's pin exchanges with prefill and their time (cumulative).
		Confirms  uint64 `json:"confirms"`
		ConfirmUS uint64 `json:"confirm_us"`
	}
)

// runDecode serves a "decode" peer: a decode engine with one Consumer in
// GONIXL_PEER_MODE (pull or push) on device GONIXL_PEER_DEV.
func runDecode() error {
	c, err := ParentConn()
	if err != nil {
		return err
	}
	fail := func(err error) error { c.Send("error", err.Error()); return err }
	mode, dev := os.Getenv("GONIXL_PEER_MODE"), envInt("GONIXL_PEER_DEV", 0)
	g := connGeom()
	m, err := openMemory(dev)
	if err != nil {
		return fail(err)
	}
	defer m.close()
	size := kvBytes(g.layers, g.blocks)
	base, err := m.alloc(size)
	if err != nil {
		return fail(err)
	}
	defer m.free(base)
	if err := m.set(base, 0, size); err != nil {
		return fail(err)
	}
	layout := kvLayout(m, base, g.layers, g.blocks)
	st, closeStaging, err := stagingFor(m, dev, g, os.Getenv("GONIXL_PEER_STAGING"))
	if err != nil {
		return fail(err)
	}
	defer closeStaging()
	name := fmt.Sprintf("decode-%s-gpu%d", mode, dev)
	agent, err := newAgent(nil, name, m)
	if err != nil {
		return fail(err)
	}
	defer agent.Close()

	type consumer interface {
		Close() error
		Pending() int
	}
	var cons consumer
	var start func(loadMsg) error
	var drain func() []doneMsg
	var snapshot func() connector.Stats
	// ready is the consumer's Ready channel: the drainer wakes on it, not
	// on a timer (a Go timer under 1 ms fires after about 1 ms on Linux,
	// which the critical path would count).
	var ready <-chan struct{}
	// parts is decode's staged_parts_scattered at the last end: each end
	// reports the parts scattered since (one request at a time: its own).
	var parts uint64
	ends := func(id string, err error) doneMsg {
		d := doneMsg{ID: id, EndNano: time.Now().UnixNano()}
		if err != nil {
			d.Err = err.Error()
		}
		if st.Mode != connector.StagingOff {
			s := snapshot()
			d.Stage = map[string]uint64{}
			for _, k := range stageCounters {
				d.Stage[k], _ = s.Get(k)
			}
			d.Stage["xfer_us"], d.Stage["xfers"] = uint64(s.XferTime.Sum.Microseconds()), s.XferTime.Count
			now, _ := s.Get("staged_parts_scattered")
			d.Stage["parts_since"], parts = now-parts, now
		}
		return d
	}
	poll := pollInterval()
	switch mode {
	case "pull":
		e, err := pullconn.NewEngine(connector.EngineConfig{EngineID: name, Model: modelName, Geometry: descriptors.GeometryOf(layout)})
		if err != nil {
			return fail(err)
		}
		defer e.Close()
		pc, err := pullconn.NewConsumer(e, pullconn.Config{RankConfig: connector.RankConfig{Agent: agent, Layout: layout, StatsInterval: -1, PollInterval: poll, Staging: st}})
		if err != nil {
			return fail(err)
		}
		cons = pc
		snapshot, ready = pc.Stats, pc.Ready()
		start = func(l loadMsg) error { return pc.Load(l.ID, *l.Pull, l.Blocks) }
		drain = func() (out []doneMsg) {
			for _, r := range pc.Drain() {
				out = append(out, ends(r.RequestID, r.Err))
			}
			return out
		}
	case "push":
		e, err := pushconn.NewEngine(connector.EngineConfig{EngineID: name, Model: modelName, Geometry: descriptors.GeometryOf(layout)})
		if err != nil {
			return fail(err)
		}
		defer e.Close()
		pc, err := pushconn.NewConsumer(e, pushconn.Config{RankConfig: connector.RankConfig{Agent: agent, Layout: layout, StatsInterval: -1, PollInterval: poll, Staging: st}})
		if err != nil {
			return fail(err)
		}
		cons = pc
		snapshot, ready = pc.Stats, pc.Ready()
		start = func(l loadMsg) error { return pc.Register(l.ID, l.Push, l.Blocks) }
		drain = func() (out []doneMsg) {
			for _, r := range pc.Drain() {
				out = append(out, ends(r.RequestID, r.Err))
			}
			return out
		}
	default:
		return fail(fmt.Errorf("GONIXL_PEER_MODE is %q, want pull or push", mode))
	}
	defer cons.Close()
	if err := c.Send("hello", decodeHello{Agent: name}); err != nil {
		return err
	}

	var mu sync.Mutex
	reqs := map[string]loadMsg{}
	toCheck := make(chan doneMsg, 1024)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // drainer: stamps each end as soon as the connector reports it
		defer wg.Done()
		for {
			ds := drain()
			if len(ds) > 0 {
				// One snapshot per batch, taken after every end in it
				// was stamped.
				s := snapshot()
				for _, d := range ds {
					d.XferNS, d.Xfers = int64(s.XferTime.Sum), s.XferTime.Count
					d.PostNS, d.Posts = int64(s.PostTime.Sum), s.PostTime.Count
					d.ByNIXL = counter(s, "transfers_timed_by_nixl")
					d.Confirms, d.ConfirmUS = counter(s, "confirmations"), counter(s, "confirmation_microseconds")
					toCheck <- d
				}
			}
			select {
			case <-stop:
				return
			case <-ready:
			case <-time.After(time.Millisecond): // Drain also wakes pull's reader
			}
		}
	}()
	go func() { // checker: bytes, then zero the blocks, then report
		defer wg.Done()
		for {
			var d doneMsg
			select {
			case <-stop:
				return
			case d = <-toCheck:
			}
			mu.Lock()
			l := reqs[d.ID]
			delete(reqs, d.ID)
			mu.Unlock()
			d.RecvNano = l.recv
			if d.Err == "" {
				spans := requestSpans(&layout, base, l)
				for _, s := range spans {
					d.Checked += s.Len
				}
				if err := checkPattern(m, prefillSeed, spans); err != nil {
					d.Err = "bytes: " + err.Error()
				}
			}
			if err := m.zero(mergeSpans(requestSpans(&layout, base, loadMsg{Blocks: l.Blocks, SrcBlocks: l.SrcBlocks, Full: true}))); err != nil && d.Err == "" {
				d.Err = "zeroing the blocks: " + err.Error()
			}
			c.Send("done", d)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for {
		msg, err := c.Recv(30 * time.Minute)
		if err != nil {
			return fmt.Errorf("parent gone: %w", err)
		}
		switch msg.Kind {
		case "load":
			var l loadMsg
			if err := msg.Decode(&l); err != nil {
				return fail(err)
			}
			l.recv = time.Now().UnixNano()
			mu.Lock()
			reqs[l.ID] = l
			mu.Unlock()
			if err := start(l); err != nil {
				mu.Lock()
				delete(reqs, l.ID)
				mu.Unlock()
				c.Send("done", doneMsg{ID: l.ID, EndNano: time.Now().UnixNano(), Err: "start: " + err.Error()})
			}
		case "quit":
			if n := cons.Pending(); n != 0 {
				c.Send("error", fmt.Sprintf("%d requests still pending at quit", n))
			}
			return c.Send("bye", nil)
		default:
			return fail(fmt.Errorf("unknown command %q", msg.Kind))
		}
	}
}

// sampleEvery is the region stride of the sampled check: one block in
// every 8th region, a different block each time, so checking stays well
// under a millisecond a request while every region and block position gets
// checked over a run.
const sampleEvery = 8

// requestSpans returns the decode spans a request must fill, with the
// prefill pattern offsets they must hold: every block of every region
// (Full), or one block in every sampleEvery-th region.
func requestSpans(l *descriptors.Layout, base uint64, r loadMsg) []span {
	var out []span
	for reg := range l.NumRegions() {
		for i := range r.Blocks {
			if !r.Full && (reg%sampleEvery != r.Seq%sampleEvery || i != (reg+r.Seq)%len(r.Blocks)) {
				continue
			}
			d := l.BlockDesc(reg, r.Blocks[i])
			// Prefill's layout is the same geometry from its own base.
			pat := uint64(reg)*l.RegionLen() + uint64(r.SrcBlocks[i])*l.BlockLen()
			out = append(out, span{Addr: d.Addr, PatOff: pat, Len: d.Len})
		}
	}
	return out
}

// mergeSpans returns the memory ranges spans cover, adjacent ones merged
// (their pattern offsets are dropped): one memset per run of blocks instead
// of one per block, which at 16k blocks a request kept decode's GPU busy.
func mergeSpans(spans []span) []span {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b span) int { return cmp.Compare(a.Addr, b.Addr) })
	var out []span
	for _, x := range s {
		if n := len(out); n > 0 && out[n-1].Addr+out[n-1].Len == x.Addr {
			out[n-1].Len += x.Len
			continue
		}
		out = append(out, span{Addr: x.Addr, Len: x.Len})
	}
	return out
}

// connFixture is a prefill rank in this process and a decode rank in a
// peer, in one transfer mode.
type connFixture struct {
	mode   string
	g      connGeometry
	m      memory
	base   uint64
	agent  nixl.Agent
	pullE  *connector.Engine
	pullP  *pullconn.Producer
	pushE  *connector.Engine
	pushP  *pushconn.Producer
	peer   *Peer
	dones  chan doneMsg
	errs   chan error
	seq    int
	closed bool
	// staging is GONIXL_E2E_STAGING when the fixture started (off, on,
	// auto), for both processes; closeStaging frees prefill's slots.
	staging      string
	closeStaging func()
	// progressChunks (push), when > 1, splits each request's prefill time
	// into that many chunks and reports the blocks of every chunk but the
	// last with Producer.Progress as it ends (progressive push).
	progressChunks int
}

func newConnFixture(mode string, dev int) (*connFixture, error) {
	f := &connFixture{mode: mode, g: connGeom(), dones: make(chan doneMsg, 4096), errs: make(chan error, 1)}
	m, err := openMemory(0)
	if err != nil {
		return nil, err
	}
	f.m = m
	size := kvBytes(f.g.layers, f.g.blocks)
	if f.base, err = m.alloc(size); err != nil {
		f.close()
		return nil, err
	}
	if err := fillSpans(m, prefillSeed, []span{{Addr: f.base, PatOff: 0, Len: size}}); err != nil {
		f.close()
		return nil, err
	}
	layout := kvLayout(m, f.base, f.g.layers, f.g.blocks)
	f.staging = os.Getenv("GONIXL_E2E_STAGING")
	st, closeStaging, err := stagingFor(m, 0, f.g, f.staging)
	if err != nil {
		f.close()
		return nil, err
	}
	f.closeStaging = closeStaging
	name := fmt.Sprintf("prefill-%s-gpu0", mode)
	if f.agent, err = newAgent(nil, name, m); err != nil {
		f.close()
		return nil, err
	}
	poll := pollInterval()
	switch mode {
	case "pull":
		if f.pullE, err = pullconn.NewEngine(connector.EngineConfig{EngineID: name, Model: modelName, Geometry: descriptors.GeometryOf(layout)}); err == nil {
			f.pullP, err = pullconn.NewProducer(f.pullE, pullconn.Config{RankConfig: connector.RankConfig{Agent: f.agent, Layout: layout, StatsInterval: -1, PollInterval: poll, Staging: st}})
		}
	case "push":
		if f.pushE, err = pushconn.NewEngine(connector.EngineConfig{EngineID: name, Model: modelName, Geometry: descriptors.GeometryOf(layout)}); err == nil {
			f.pushP, err = pushconn.NewProducer(f.pushE, pushconn.Config{RankConfig: connector.RankConfig{Agent: f.agent, Layout: layout, StatsInterval: -1, PollInterval: poll, Staging: st}})
		}
	}
	if err != nil {
		f.close()
		return nil, err
	}
	f.peer, err = StartPeer("TestGPUPeer", "decode", []string{"GONIXL_PEER_MODE=" + mode, "GONIXL_PEER_DEV=" + strconv.Itoa(dev), "GONIXL_PEER_STAGING=" + f.staging}, os.Stderr)
	if err != nil {
		f.close()
		return nil, err
	}
	if err := f.peer.Conn().Expect(waitLimit, "hello", &decodeHello{}); err != nil {
		f.close()
		return nil, err
	}
	go func() {
		for {
			msg, err := f.peer.Conn().Recv(time.Hour)
			if err != nil {
				f.errs <- err
				return
			}
			switch msg.Kind {
			case "done":
				var d doneMsg
				if err := msg.Decode(&d); err != nil {
					f.errs <- err
					return
				}
				f.dones <- d
			case "bye":
				f.errs <- errBye
				return
			default:
				var s string
				msg.Decode(&s)
				f.errs <- fmt.Errorf("decode peer: %s: %s", msg.Kind, s)
				return
			}
		}
	}()
	return f, nil
}

var errBye = errors.New("decode peer said bye")

func (f *connFixture) close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if f.peer != nil {
		f.peer.Conn().Send("quit", nil)
		select {
		case err := <-f.errs:
			if !errors.Is(err, errBye) {
				keep(err)
			}
		case <-time.After(waitLimit):
			keep(fmt.Errorf("decode peer did not say bye within %s", waitLimit))
		}
		keep(f.peer.Wait(waitLimit))
	}
	if f.pullP != nil {
		keep(f.pullP.Close())
	}
	if f.pullE != nil {
		keep(f.pullE.Close())
	}
	if f.pushP != nil {
		keep(f.pushP.Close())
	}
	if f.pushE != nil {
		keep(f.pushE.Close())
	}
	if f.agent != nil {
		keep(f.agent.Close())
	}
	if f.closeStaging != nil {
		f.closeStaging()
	}
	if f.base != 0 {
		keep(f.m.free(f.base))
	}
	if f.m != nil {
		keep(f.m.close())
	}
	return first
}

func (f *connFixture) drainFreed() []string {
	if f.pullP != nil {
		return f.pullP.DrainFreed()
	}
	return f.pushP.DrainFreed()
}

// runStats is what one run of requests measured.
type runStats struct {
	critical []time.Duration // prefill finished -> decode has every block
	// The critical path's parts (pull): prefill's RequestFinished (its
	// gather included), the hop of the Params to the decode process, and
	// decode's load from receipt to the end.
	finish, hop, load []time.Duration
	bytes             uint64            // checked on decode
	stalls            int               // requests that waited for a free slot
	stage             map[string]uint64 // decode's staging counters at the last end
	// partScatters: staged parts decode scattered as they landed
	// (PUSH_STAGED_PART), over the run's requests.
	partScatters uint64
	// initiator is decode's transfer and post times at the last end
	// (cumulative; pull's initiator).
	initiator xferCounters
}

// run sends n requests at rate per second. Each request's prefill compute
// is prefillTime: push registers at the request's arrival and prefill
// finishes prefillTime later; pull starts loading when prefill finishes.
// fragEvery > 0 makes every fragEvery-th request fragmented; full checks
// every byte instead of one block per region. It fails unless every
// request ends exactly once, without error, with the right bytes, and
// prefill frees every request exactly once.
func (f *connFixture) run(n int, rate float64, prefillTime time.Duration, fragEvery int, full bool) (runStats, error) {
	type event struct {
		at   time.Time
		k    int
		fin  bool
		prog int // > 0: the end of chunk prog, reported with Progress
	}
	slots := f.g.blocks / f.g.reqBlocks
	if slots == 0 {
		// No request would ever find a free slot: say so instead of
		// waiting for one until the deadline.
		return runStats{}, fmt.Errorf("a request of %d blocks (GONIXL_E2E_REQ_BLOCKS) does not fit the cache's %d blocks", f.g.reqBlocks, f.g.blocks)
	}
	pFree, dFree := make([]int, 0, slots), make([]int, 0, slots)
	for s := range slots {
		pFree, dFree = append(pFree, s), append(dFree, (s+slots/2)%slots)
	}
	begin := time.Now().Add(5 * time.Millisecond)
	var evs []event
	for k := range n {
		arrive := begin.Add(time.Duration(float64(k) / rate * float64(time.Second)))
		if f.mode == "push" {
			evs = append(evs, event{at: arrive, k: k})
			for c := 1; c < f.progressChunks; c++ {
				evs = append(evs, event{at: arrive.Add(prefillTime * time.Duration(c) / time.Duration(f.progressChunks)), k: k, prog: c})
			}
		}
		evs = append(evs, event{at: arrive.Add(prefillTime), k: k, fin: true})
	}
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })

	type req struct {
		id           string
		pSlot, dSlot int
		pBlocks      []int
		dBlocks      []int
		t0, t1       int64 // before and after RequestFinished (t1: pull only)
		frag         bool
		seq          int
		ended, freed bool
	}
	reqs := make([]*req, n)
	byID := map[string]*req{}
	var st runStats
	var failed []string
	pending, unfreed := 0, 0
	handle := func(d doneMsg) error {
		r := byID[d.ID]
		if r == nil || r.ended {
			return fmt.Errorf("decode ended request %q twice or unknown", d.ID)
		}
		r.ended = true
		pending--
		dFree = append(dFree, r.dSlot)
		if d.Err != "" {
			failed = append(failed, d.ID+": "+d.Err)
			return nil
		}
		st.critical = append(st.critical, time.Duration(d.EndNano-r.t0))
		if r.t1 != 0 {
			st.finish = append(st.finish, time.Duration(r.t1-r.t0))
			st.hop = append(st.hop, time.Duration(d.RecvNano-r.t1))
			st.load = append(st.load, time.Duration(d.EndNano-d.RecvNano))
		}
		st.bytes += d.Checked
		st.initiator = xferCounters{xfer: time.Duration(d.XferNS), xfers: d.Xfers, post: time.Duration(d.PostNS), posts: d.Posts, byNIXL: d.ByNIXL, confirms: d.Confirms, confirm: time.Duration(d.ConfirmUS) * time.Microsecond}
		if d.Stage != nil {
			st.stage = d.Stage
			st.partScatters += d.Stage["parts_since"]
		}
		return nil
	}
	step := func(wait time.Duration) error {
		for _, id := range f.drainFreed() {
			r := byID[id]
			if r == nil || r.freed {
				return fmt.Errorf("prefill freed request %q twice or unknown", id)
			}
			r.freed = true
			unfreed--
			pFree = append(pFree, r.pSlot)
		}
		select {
		case d := <-f.dones:
			return handle(d)
		case err := <-f.errs:
			return err
		case <-time.After(wait):
			return nil
		}
	}
	deadline := time.Now().Add(waitLimit + time.Duration(float64(n)/rate*float64(time.Second)))
	// waitFor steps until cond holds.
	waitFor := func(what string, cond func() bool) error {
		for !cond() {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not within the deadline", what)
			}
			if err := step(100 * time.Microsecond); err != nil {
				return err
			}
		}
		return nil
	}
	for _, ev := range evs {
		for d := time.Until(ev.at); d > 0; d = time.Until(ev.at) {
			if err := step(min(d, 200*time.Microsecond)); err != nil {
				return st, err
			}
		}
		r := reqs[ev.k]
		if r == nil {
			f.seq++
			r = &req{id: fmt.Sprintf("req-%d-%s", f.seq, f.mode), seq: f.seq}
			reqs[ev.k], byID[r.id] = r, r
			r.frag = fragEvery > 0 && ev.k%fragEvery == fragEvery-1
			if len(dFree) == 0 {
				st.stalls++
			}
			if err := waitFor("a free decode slot", func() bool { return len(dFree) > 0 }); err != nil {
				return st, err
			}
			r.dSlot, dFree = dFree[0], dFree[1:]
			r.dBlocks = slotBlocks(f.g, r.dSlot, r.frag, uint64(f.seq))
		}
		if ev.prog > 0 {
			final := len(r.pBlocks) * ev.prog / f.progressChunks
			if err := f.pushP.Progress(r.id, r.pBlocks[:final], len(r.pBlocks)*16); err != nil {
				return st, fmt.Errorf("progress of %s: %w", r.id, err)
			}
			continue
		}
		if f.mode == "push" && !ev.fin {
			// The proxy hands decode the request; decode registers.
			// The prefill slot is chosen now so decode knows the
			// source blocks it checks against (prefill would choose
			// them when it schedules the request).
			if err := f.choosePrefill(r.frag, &pFree, &st, waitFor, r.dSlot, &r.pSlot, &r.pBlocks); err != nil {
				return st, err
			}
			pending++
			unfreed++
			coords := pushconn.Coordinates(f.pushE)
			if err := f.peer.Conn().Send("load", loadMsg{ID: r.id, Push: coords, Blocks: r.dBlocks, SrcBlocks: r.pBlocks, Full: full, Seq: r.seq}); err != nil {
				return st, err
			}
			continue
		}
		if f.mode == "pull" {
			if err := f.choosePrefill(r.frag, &pFree, &st, waitFor, r.dSlot, &r.pSlot, &r.pBlocks); err != nil {
				return st, err
			}
		}
		r.t0 = time.Now().UnixNano()
		if f.mode == "push" {
			if _, err := f.pushP.RequestFinished(r.id, r.pBlocks); err != nil {
				return st, err
			}
			continue
		}
		params, err := f.pullP.RequestFinished(r.id, r.pBlocks)
		if err != nil {
			return st, err
		}
		r.t1 = time.Now().UnixNano()
		pending++
		unfreed++
		if err := f.peer.Conn().Send("load", loadMsg{ID: r.id, Pull: &params, Blocks: r.dBlocks, SrcBlocks: r.pBlocks, Full: full, Seq: r.seq}); err != nil {
			return st, err
		}
	}
	if err := waitFor("every request ended on decode and freed on prefill", func() bool { return pending == 0 && unfreed == 0 }); err != nil {
		return st, fmt.Errorf("%w (%d pending, %d not freed)", err, pending, unfreed)
	}
	if len(failed) > 0 {
		return st, fmt.Errorf("%d of %d requests failed, first: %s", len(failed), n, failed[0])
	}
	return st, nil
}

// choosePrefill takes a free prefill slot for a request.
func (f *connFixture) choosePrefill(frag bool, pFree *[]int, st *runStats, waitFor func(string, func() bool) error, dSlot int, pSlot *int, pBlocks *[]int) error {
	if len(*pFree) == 0 {
		st.stalls++
	}
	if err := waitFor("a free prefill slot", func() bool { return len(*pFree) > 0 }); err != nil {
		return err
	}
	*pSlot, *pFree = (*pFree)[0], (*pFree)[1:]
	*pBlocks = slotBlocks(f.g, *pSlot, frag, uint64(dSlot)+1000)
	return nil
}

var (
	connMu       sync.Mutex
	connFixtures = map[string]*connFixture{}
)

// sharedConn returns the fixture for mode with decode on device dev, shared
// by the tests and benchmarks and closed after them.
func sharedConn(tb testing.TB, mode string, dev int) *connFixture {
	connMu.Lock()
	defer connMu.Unlock()
	key := fmt.Sprintf("%s-%d", mode, dev)
	if f := connFixtures[key]; f != nil {
		return f
	}
	f, err := newConnFixture(mode, dev)
	if err != nil {
		tb.Fatal(err)
	}
	connFixtures[key] = f
	afterTests = append(afterTests, func() {
		if err := f.close(); err != nil {
			fmt.Printf("closing the %s connector fixture: %v\n", key, err)
		}
	})
	return f
}

// ownConn returns a fixture of its own for mode, decode on device 0, made
// with GONIXL_E2E_STAGING set to staging; it is closed when tb ends.
func ownConn(tb testing.TB, mode, staging string) *connFixture {
	tb.Helper()
	defer withEnv("GONIXL_E2E_STAGING", staging)()
	f, err := newConnFixture(mode, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := f.close(); err != nil {
			tb.Error(err)
		}
	})
	return f
}

// millis is d in milliseconds, as the benchmarks report times.
func millis(d time.Duration) float64 { return float64(d) / 1e6 }

// TestConnectors moves four requests through each connector with both KV
// caches in VRAM, prefill on GPU 0 and decode in another process on GPU 0
// and, when present, GPU 1; every byte of every request is checked on
// decode, alternately contiguous and fragmented blocks.
func TestConnectors(t *testing.T) {
	needDevices(t, 1)
	for _, dev := range benchDevices() {
		for _, mode := range []string{"pull", "push"} {
			t.Run(fmt.Sprintf("gpu0-gpu%d/%s", dev, mode), func(t *testing.T) {
				f := sharedConn(t, mode, dev)
				st, err := f.run(4, 20, 5*time.Millisecond, 2, true)
				if err != nil {
					t.Fatal(err)
				}
				g := f.g
				l := kvLayout(f.m, 0, g.layers, g.blocks)
				want := uint64(4*g.reqBlocks*2*g.layers) * l.BlockLen()
				if st.bytes != want || len(st.critical) != 4 {
					t.Fatalf("checked %d bytes of %d requests, want %d bytes of 4", st.bytes, len(st.critical), want)
				}
			})
		}
	}
}

// BenchmarkCriticalPath sends b.N 2k-token requests at a fixed rate
// through each connector and reports the critical path, from prefill
// finishing a request to decode holding all its blocks (push: decode
// registered at arrival, prefill WRITEs when done; pull: decode READs once
// prefill's params reached it), as p50 and p99 in ms. Prefill compute is
// 10 ms per request. Every request's bytes are checked on decode (one
// block in every 8th region) and its blocks zeroed before reuse.
func BenchmarkCriticalPath(b *testing.B) {
	needDevices(b, 1)
	for _, dev := range benchDevices() {
		for _, rate := range []float64{10, 50, 200, 500} {
			for _, mode := range []string{"pull", "push"} {
				b.Run(fmt.Sprintf("gpu0-gpu%d/rate=%g/%s", dev, rate, mode), func(b *testing.B) {
					f := sharedConn(b, mode, dev)
					b.ResetTimer()
					st, err := f.run(b.N, rate, 10*time.Millisecond, envInt("GONIXL_E2E_FRAG_EVERY", 0), false)
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					sum := latency.Summarize(st.critical)
					b.ReportMetric(millis(sum.P50), "p50_ms")
					b.ReportMetric(millis(sum.P99), "p99_ms")
					b.ReportMetric(float64(st.stalls), "stalls")
				})
			}
		}
	}
}

// BenchmarkProgressivePush is the critical path of push (from prefill
// finishing a request to decode holding all its blocks) with and without
// progressive push: the prefill time (GONIXL_E2E_PREFILL_MS, default 350:
// a 16k-token prompt of Qwen3-32B on TP 8 H200s) is split into
// GONIXL_E2E_PROGRESS_CHUNKS chunks (default 8, chunked prefill of 2048
// tokens), and the blocks of every chunk but the last are reported with
// Producer.Progress as it ends, so only the last chunk's transfer (and
// whatever is still moving) is left after prefill. Every request
// fragmented (no two blocks adjacent) unless GONIXL_E2E_FRAG_EVERY says
// otherwise (0: every request contiguous, whose chunks move as a few large
// descriptors; n: every nth fragmented); 16k tokens with
// GONIXL_E2E_REQ_BLOCKS=1024. With GONIXL_E2E_STAGING=on each report's
// blocks are gathered into a staging slot and written into decode's as one
// run per region (prog_staged counts those WRITEs), which decode scatters
// as each lands (dec_part_scatters, per request).
//
//	GONIXL_E2E_REQ_BLOCKS=1024 go test -tags "nixl cuda" -run '^$' -bench ProgressivePush -benchtime 8x ./examples/gpue2e
//	GONIXL_E2E_FRAG_EVERY=0 GONIXL_E2E_REQ_BLOCKS=1024 go test -tags "nixl cuda" -run '^$' -bench ProgressivePush -benchtime 8x ./examples/gpue2e
//	GONIXL_E2E_STAGING=on GONIXL_E2E_REQ_BLOCKS=1024 go test -tags "nixl cuda" -run '^$' -bench ProgressivePush -benchtime 8x ./examples/gpue2e
//
// The figures are in docs/gpu.md.
func BenchmarkProgressivePush(b *testing.B) {
	needDevices(b, 1)
	prefill := time.Duration(envInt("GONIXL_E2E_PREFILL_MS", 350)) * time.Millisecond
	chunks := envInt("GONIXL_E2E_PROGRESS_CHUNKS", 8)
	fragEvery := envInt("GONIXL_E2E_FRAG_EVERY", 1)
	for _, dev := range benchDevices() {
		for _, progressive := range []bool{false, true} {
			b.Run(fmt.Sprintf("gpu0-gpu%d/progressive=%v", dev, progressive), func(b *testing.B) {
				f := sharedConn(b, "push", dev)
				if progressive {
					f.progressChunks = chunks
					defer func() { f.progressChunks = 0 }()
				}
				s0 := f.pushP.Stats()
				w0, sw0, d0 := counter(s0, "progressive_writes"), counter(s0, "progressive_staged_writes"), counter(s0, "progressive_deferred")
				b.ResetTimer()
				// One request at a time: the rate leaves each one its
				// prefill and transfer alone.
				st, err := f.run(b.N, 0.5, prefill, fragEvery, false)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				sum := latency.Summarize(st.critical)
				b.ReportMetric(millis(sum.P50), "after_prefill_p50_ms")
				b.ReportMetric(millis(sum.P99), "after_prefill_p99_ms")
				// Per request: the WRITEs posted while prefill ran, those of
				// them gathered into decode's staging slot, and the reports
				// put off for want of a free prefill slot.
				s1 := f.pushP.Stats()
				n := float64(b.N)
				b.ReportMetric(float64(counter(s1, "progressive_writes")-w0)/n, "prog_writes")
				b.ReportMetric(float64(counter(s1, "progressive_staged_writes")-sw0)/n, "prog_staged")
				b.ReportMetric(float64(counter(s1, "progressive_deferred")-d0)/n, "prog_deferred")
				// And decode's part scatters per request: parts it scattered
				// as they landed, before prefill ended.
				b.ReportMetric(float64(st.partScatters)/n, "dec_part_scatters")
			})
		}
	}
}
