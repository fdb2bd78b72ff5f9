package pullconn

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// The bidirectional campaign drives multi-turn conversations through a
// prefill and a decode engine that each hold and read (P->D every turn,
// D->P from the second turn on) under seeded faults on every agent of
// both directions, lease expiries, turns that start late or near their
// history's deadline, steps of either engine's clock and aborts on all
// four roles, the way a serving engine's step loop does. Every block handed
// back is poisoned; a done result is checked byte for byte (wrong bytes)
// and every block taken from a free list must still be poison (writes
// after release). Every hold must be freed exactly once by every rank and
// every load end exactly once on every rank. GONIXL_CAMPAIGN=long runs
// 5 seeds x 600 conversations per TP pairing.

type bidirFigures struct {
	conversations, turns, turnsDone, turnsFailed         int
	histLoads, histDone, histFailed, histBelow           int
	histTokensRead, histTokensRecomputed                 int
	wrongBytes, writesAfterRelease, releasedTwice, twice int
	steps                                                int
	pinnedSteps                                          int // steps of a holder's clock aimed at a load in flight
	lateRanks                                            int // ranks that finished a request after its first rank's hold ended
}

func (f *bidirFigures) add(o bidirFigures) {
	f.conversations += o.conversations
	f.turns += o.turns
	f.turnsDone += o.turnsDone
	f.turnsFailed += o.turnsFailed
	f.histLoads += o.histLoads
	f.histDone += o.histDone
	f.histFailed += o.histFailed
	f.histBelow += o.histBelow
	f.histTokensRead += o.histTokensRead
	f.histTokensRecomputed += o.histTokensRecomputed
	f.wrongBytes += o.wrongBytes
	f.writesAfterRelease += o.writesAfterRelease
	f.releasedTwice += o.releasedTwice
	f.twice += o.twice
	f.steps += o.steps
	f.pinnedSteps += o.pinnedSteps
	f.lateRanks += o.lateRanks
}

func (f bidirFigures) String() string {
	return fmt.Sprintf("%d clock steps (%d of a holder's clock during a load); %d conversations, %d turns (%d done, %d failed); %d history loads (%d read back, %d failed and recomputed, %d below the threshold); "+
		"%d history tokens read back, %d recomputed; wrong bytes in done results: %d; writes after release: %d; holds freed twice: %d; second ends: %d; late ranks: %d",
		f.steps, f.pinnedSteps, f.conversations, f.turns, f.turnsDone, f.turnsFailed, f.histLoads, f.histDone, f.histFailed, f.histBelow,
		f.histTokensRead, f.histTokensRecomputed, f.wrongBytes, f.writesAfterRelease, f.releasedTwice, f.twice, f.lateRanks)
}

func TestBidirFaultCampaign(t *testing.T) {
	seeds, convs := 2, 40
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, convs = 5, 600
	}
	var total bidirFigures
	for _, pair := range []struct{ p, d int }{{2, 2}, {2, 1}, {1, 2}} {
		for seed := 1; seed <= seeds; seed++ {
			name := fmt.Sprintf("tp%d-tp%d/seed%d", pair.p, pair.d, seed)
			t.Run(name, func(t *testing.T) {
				f := runBidirCampaign(t, uint64(seed), pair.p, pair.d, convs)
				t.Logf("%s: %v", name, f)
				total.add(f)
			})
		}
	}
	t.Logf("bidirectional pull campaign total: %v", total)
	if total.wrongBytes+total.writesAfterRelease+total.releasedTwice+total.twice != 0 {
		t.Fatalf("bidirectional campaign: %v", total)
	}
}

// fifo is a free list that hands out the blocks freed longest ago, so a
// block handed back is not taken again at once and a late write into it
// shows as lost poison.
type fifo struct{ ids []int }

func newFifo(n int) *fifo { return &fifo{ids: blocksFrom(0, n)} }

func (f *fifo) take(n int) ([]int, bool) {
	if len(f.ids) < n {
		return nil, false
	}
	out := append([]int(nil), f.ids[:n]...)
	f.ids = f.ids[n:]
	return out, true
}

func (f *fifo) give(ids []int) { f.ids = append(f.ids, ids...) }

// engineMem is one engine's KV memory in the campaign.
type engineMem struct {
	name string
	bufs []*nixl.Buffer
	ls   []descriptors.Layout
	free *fifo
}

func (m *engineMem) poison(blocks []int) {
	for r, l := range m.ls {
		b := m.bufs[r].Bytes()
		for g := 0; g < l.NumRegions(); g++ {
			for _, blk := range blocks {
				off := uint64(g)*l.RegionLen() + uint64(blk)*l.BlockLen()
				for i := range l.BlockLen() {
					b[off+i] = poison
				}
			}
		}
	}
}

func (m *engineMem) giveBack(blocks []int) {
	m.poison(blocks)
	m.free.give(blocks)
}

// take takes n blocks and reports how many of them lost their poison
// while free: a write after release.
func (m *engineMem) take(t *testing.T, n int, why string) ([]int, int, bool) {
	blocks, ok := m.free.take(n)
	if !ok {
		return nil, 0, false
	}
	bad := 0
	for r, l := range m.ls {
		b := m.bufs[r].Bytes()
		for g := 0; g < l.NumRegions(); g++ {
			for _, blk := range blocks {
				off := uint64(g)*l.RegionLen() + uint64(blk)*l.BlockLen()
				for i := range l.BlockLen() {
					if b[off+i] != poison {
						bad++
						t.Errorf("%s rank %d block %d was written after it was handed back (taken for %s)", m.name, r, blk, why)
						break
					}
				}
			}
		}
	}
	return blocks, bad, true
}

// bidirHold is one held request on a holder's ranks.
type bidirHold struct {
	blocks []int
	freed  []int
}

// bidirConv is one conversation's state in the step loop.
type bidirConv struct {
	n, seed, turn  int
	prompt, gen    int // this turn's prompt and generated tokens
	total          int // tokens of the conversation so far (history)
	hist           int // exported history tokens (0: none)
	hp             Params
	pblocks        []int
	dblocks        []int
	stage          int
	at, abortAt    time.Time
	ends           []connector.Result
	got            []bool
	readingHistory bool
	// stepAt is when to step the holder's clock past the hold's lease
	// while this load's READs may be in flight (zero: not this load).
	stepAt time.Time
}

const (
	stStart = iota
	stHistory
	stTurn
	stLoadTurn
)

func runBidirCampaign(t *testing.T, seed uint64, ptp, dtp, convs int) bidirFigures {
	const (
		lease = 200 * time.Millisecond
		turns = 3
		live  = 3
	)
	rng := rand.New(rand.NewPCG(seed, 0x51ed2701))
	// A Producer (and a HistoryExporter, which holds) takes prefill's
	// fields, a Consumer (and a HistoryReader, which reads) decode's.
	shortPrefill := func(c *Config) {
		c.Lease = lease
		c.HeartbeatExtension = lease * 2 / 3
		c.ParamsAfterAllRanks = true
	}
	shortDecode := func(c *Config) {
		c.Lease = lease
		c.HeartbeatInterval = lease / 6
		c.TransferTimeout = 100 * time.Millisecond
		c.ExpiryMargin = 20 * time.Millisecond
		if seed%2 == 0 {
			c.Inline = true
		}
	}
	// Clock steps of either engine, either way, by up to 1.5 leases (as
	// an operator or NTP steps a host's clock): holds end early or late,
	// and the other engine's view of their deadlines goes wrong; only the
	// pins keep the bytes right then.
	pclk, dclk := &steppedClock{}, &steppedClock{}
	c := newBidirCluster(t, bidirOpts{
		prefill: side{ptp, 16}, decode: side{dtp, 16}, threshold: 32, prefillClock: pclk, decodeClock: dclk,
		fabric:      []loopback.FabricOption{loopback.WithSeed(seed), loopback.WithModel(loopback.FixedLatency(5 * time.Millisecond))},
		exporterCfg: shortPrefill, readerCfg: shortDecode, producerCfg: shortPrefill, consumerCfg: shortDecode,
	})
	for _, flt := range []loopback.Fault{
		{Kind: loopback.FailPost, Probability: 0.03},
		{Kind: loopback.FailInFlight, Probability: 0.03},
		{Kind: loopback.DropNotif, Probability: 0.03},
		{Kind: loopback.DelayNotif, Probability: 0.05, Delay: 40 * time.Millisecond},
	} {
		_, err := c.fab.AddFault(flt)
		require.NoError(t, err)
	}
	pm := &engineMem{name: "prefill", bufs: c.pbufs, ls: c.playouts, free: newFifo(testBlocks)}
	dm := &engineMem{name: "decode", bufs: c.dbufs, ls: c.dlayouts, free: newFifo(testBlocks)}
	pm.poison(blocksFrom(0, testBlocks))
	dm.poison(blocksFrom(0, testBlocks))

	var f bidirFigures
	f.conversations = convs
	pholds, dholds := map[string]*bidirHold{}, map[string]*bidirHold{}
	active := map[string]*bidirConv{} // by the current turn's id
	var waiting []*bidirConv
	next := 0
	id := func(cv *bidirConv) string { return fmt.Sprintf("c%d-t%d", cv.n, cv.turn) }
	hold := func(m map[string]*bidirHold, key string, blocks []int, ranks int) {
		require.NotContains(t, m, key)
		m[key] = &bidirHold{blocks: blocks, freed: make([]int, ranks)}
	}
	// collect takes the holders' DrainFreed: a hold's blocks go back when
	// every rank freed it, and a second release is counted.
	collect := func(m map[string]*bidirHold, mem *engineMem, rank int, ids []string) {
		for _, k := range ids {
			h, ok := m[k]
			if !ok {
				f.releasedTwice++
				t.Errorf("%s rank %d freed %q, which it does not hold (freed twice?)", mem.name, rank, k)
				continue
			}
			h.freed[rank]++
			if h.freed[rank] > 1 {
				f.releasedTwice++
				t.Errorf("%s rank %d freed %q twice", mem.name, rank, k)
			}
			if allOnce(h.freed) {
				mem.giveBack(h.blocks)
				delete(m, k)
			}
		}
	}
	end := func(cv *bidirConv) {
		delete(active, id(cv))
		if cv.dblocks != nil {
			dm.giveBack(cv.dblocks)
			cv.dblocks = nil
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for (next < convs || len(active) > 0 || len(waiting) > 0 || len(pholds) > 0 || len(dholds) > 0) && time.Now().Before(deadline) {
		now := time.Now()
		if next < convs && len(active)+len(waiting) < live {
			cv := &bidirConv{n: next, seed: int(seed)*1_000_000 + next*10, turn: 1}
			next++
			waiting = append(waiting, cv)
		}
		if rng.Float64() < 0.004 {
			// At any moment, so that some steps land while READs of either
			// direction are in flight.
			// To an offset from true time, not a random walk away from it:
			// the engines' clocks stay within reach of each other, as NTP
			// keeps them.
			clk := pclk
			if rng.IntN(2) == 0 {
				clk = dclk
			}
			// Mostly within half a lease (loads still fit), one in five up
			// to 1.5 leases: the reader then sees every hold of the other
			// engine as ended (failed, safely) until the next step.
			span := lease
			if rng.IntN(5) == 0 {
				span = 3 * lease
			}
			target := time.Duration(rng.Int64N(int64(span))) - span/2
			clk.Step(target - time.Duration(clk.off.Load()))
			f.steps++
		}
		// Start the turns that are due and have blocks.
		keep := waiting[:0]
		for _, cv := range waiting {
			if now.Before(cv.at) || !c.startTurn(t, cv, pm, &f, rng) {
				keep = append(keep, cv)
				continue
			}
			f.turns++
			cv.ends, cv.got = make([]connector.Result, max(ptp, dtp)), make([]bool, max(ptp, dtp))
			active[id(cv)] = cv
			if !cv.readingHistory {
				c.finishHistory(t, cv, pm, &f, rng, hold, pholds)
			} else {
				f.histLoads++
				read := c.loadHistory(id(cv), cv.hp, cv.pblocks[:cv.hist/16])
				if !read {
					f.histBelow++
				}
				if rng.Float64() < 0.05 {
					cv.abortAt = now.Add(time.Duration(rng.Int64N(int64(5 * time.Millisecond))))
				}
				cv.stepAt = holderStepAt(rng, now)
			}
		}
		waiting = keep
		// Aborts, due turn loads, and steps of a holder's clock while its
		// hold is read.
		for _, cv := range active {
			if !cv.stepAt.IsZero() && !now.Before(cv.stepAt) {
				cv.stepAt = time.Time{}
				if cv.stage == stHistory || cv.stage == stTurn {
					// Forward past the hold's lease, extensions included,
					// while the reader may still be reading: only the
					// reader's pin keeps the blocks then (a holder that
					// let the lease end through the pin would free blocks
					// the READ has not copied yet, and the harness
					// poisons freed blocks at once).
					clk := pclk // the turn's P->D load reads prefill's hold
					if cv.stage == stHistory {
						clk = dclk // the history's D->P load reads decode's
					}
					target := lease + time.Duration(rng.Int64N(int64(lease/2)))
					if d := target - time.Duration(clk.off.Load()); d > 0 {
						clk.Step(d)
						f.steps++
						f.pinnedSteps++
					}
				}
			}
			switch {
			case cv.stage == stHistory && !cv.abortAt.IsZero() && !now.Before(cv.abortAt):
				for _, hr := range c.readers {
					require.NoError(t, hr.Abort(id(cv)))
				}
				cv.abortAt = time.Time{}
			case cv.stage == stLoadTurn && !now.Before(cv.at):
				blocks, bad, ok := dm.take(t, (cv.prompt+cv.gen+15)/16, id(cv))
				if !ok {
					continue
				}
				f.writesAfterRelease += bad
				cv.dblocks = blocks
				for _, cn := range c.cons {
					require.NoError(t, cn.Load(id(cv), cv.hp, blocks[:(cv.prompt+15)/16]))
				}
				cv.stage = stTurn
				if rng.Float64() < 0.05 {
					cv.abortAt = now.Add(time.Duration(rng.Int64N(int64(5 * time.Millisecond))))
				}
				cv.stepAt = holderStepAt(rng, now)
			case cv.stage == stTurn && !cv.abortAt.IsZero() && !now.Before(cv.abortAt):
				for _, cn := range c.cons {
					require.NoError(t, cn.Abort(id(cv)))
				}
				cv.abortAt = time.Time{}
			}
		}
		// History loads' ends (prefill ranks).
		for r, hr := range c.readers {
			for _, res := range hr.Drain() {
				cv := active[res.RequestID]
				if cv == nil || cv.stage != stHistory || cv.got[r] {
					f.twice++
					t.Errorf("prefill rank %d: unexpected end of history load %q", r, res.RequestID)
					continue
				}
				cv.got[r], cv.ends[r] = true, res
				if res.Err == nil && cv.hist >= 32 {
					if err := check(pm.bufs[r:r+1], pm.ls[r:r+1], cv.seed, cv.pblocks, 0, cv.hist); err != nil {
						f.wrongBytes++
						t.Errorf("history load %q done with wrong bytes: %v", res.RequestID, err)
					}
				}
				if allGot(cv.got[:ptp]) {
					c.finishHistory(t, cv, pm, &f, rng, hold, pholds)
				}
			}
		}
		// Turn loads' ends (decode ranks).
		for r, cn := range c.cons {
			for _, res := range cn.Drain() {
				cv := active[res.RequestID]
				if cv == nil || cv.stage != stTurn || cv.got[r] {
					f.twice++
					t.Errorf("decode rank %d: unexpected end of turn load %q", r, res.RequestID)
					continue
				}
				cv.got[r], cv.ends[r] = true, res
				if res.Err == nil {
					if err := check(dm.bufs[r:r+1], dm.ls[r:r+1], cv.seed, cv.dblocks, 0, cv.prompt); err != nil {
						f.wrongBytes++
						t.Errorf("turn load %q done with wrong bytes: %v", res.RequestID, err)
					}
				}
				if !allGot(cv.got[:dtp]) {
					continue
				}
				if !allDone(cv.ends[:dtp]) {
					f.turnsFailed++
					end(cv)
					continue
				}
				f.turnsDone++
				cv.total = cv.prompt + cv.gen
				write(dm.bufs, dm.ls, cv.seed, cv.dblocks, cv.prompt, cv.total) // decode's own tokens
				full := cv.total / 16
				if cv.turn == turns || full == 0 {
					end(cv)
					continue
				}
				key := id(cv)
				cv.hp = c.export(key, cv.dblocks[:full], full*16)
				hold(dholds, key, cv.dblocks[:full], dtp)
				dm.giveBack(cv.dblocks[full:])
				cv.dblocks, cv.hist = nil, full*16
				if rng.Float64() < 0.03 {
					for _, ex := range c.exporters {
						require.NoError(t, ex.Abort(key))
					}
				}
				delete(active, key)
				cv.turn++
				cv.stage = stStart
				switch x := rng.Float64(); {
				case x < 0.7:
					cv.at = now
				case x < 0.8:
					cv.at = now.Add(time.Duration(rng.Int64N(int64(lease / 2))))
				case x < 0.9:
					// Near the hold's end: the read may straddle it, which
					// only the pin makes safe.
					cv.at = now.Add(lease - 40*time.Millisecond + time.Duration(rng.Int64N(int64(40*time.Millisecond))))
				default:
					cv.at = now.Add(lease + time.Duration(rng.Int64N(int64(lease))))
				}
				waiting = append(waiting, cv)
			}
		}
		for r, p := range c.prods {
			collect(pholds, pm, r, p.DrainFreed())
		}
		for r, ex := range c.exporters {
			collect(dholds, dm, r, ex.DrainFreed())
		}
		time.Sleep(200 * time.Microsecond)
	}
	require.Empty(t, active, "conversations still running at the deadline")
	require.Empty(t, waiting)
	require.Empty(t, pholds, "prefill holds never freed")
	require.Empty(t, dholds, "decode holds never freed")
	// Every block is back, and none was written since it came back.
	for _, m := range []*engineMem{pm, dm} {
		blocks, bad, ok := m.take(t, testBlocks, "the final check")
		require.True(t, ok, "%s lost blocks", m.name)
		f.writesAfterRelease += bad
		m.free.give(blocks)
	}
	settle()
	for r, hr := range c.readers {
		if out := hr.Drain(); len(out) > 0 {
			f.twice += len(out)
			t.Errorf("prefill rank %d: ends after the campaign: %v", r, out)
		}
	}
	for r, cn := range c.cons {
		if out := cn.Drain(); len(out) > 0 {
			f.twice += len(out)
			t.Errorf("decode rank %d: ends after the campaign: %v", r, out)
		}
	}
	f.lateRanks = c.lateRanks
	return f
}

// startTurn takes a turn's prefill blocks and, when the conversation has
// history to read back, sets it to read it; it reports false when blocks
// are short (the turn waits).
func (c *bidirCluster) startTurn(t *testing.T, cv *bidirConv, pm *engineMem, f *bidirFigures, rng *rand.Rand) bool {
	prompt := cv.total + 1 + rng.IntN(40)
	blocks, bad, ok := pm.take(t, (prompt+15)/16, fmt.Sprintf("c%d-t%d", cv.n, cv.turn))
	if !ok {
		return false
	}
	f.writesAfterRelease += bad
	cv.prompt, cv.gen, cv.pblocks = prompt, 1+rng.IntN(24), blocks
	cv.readingHistory = cv.hist > 0
	cv.stage = stHistory // without history, finishHistory follows at once
	return true
}

// finishHistory computes what the turn's prefill did not read back, holds
// the turn for decode and schedules decode's load.
func (c *bidirCluster) finishHistory(t *testing.T, cv *bidirConv, pm *engineMem, f *bidirFigures, rng *rand.Rand,
	hold func(map[string]*bidirHold, string, []int, int), pholds map[string]*bidirHold) {
	from := 0
	if cv.readingHistory {
		done := allDone(cv.ends[:len(c.readers)])
		switch {
		case done && cv.hist >= c.readers[0].Threshold():
			f.histDone++
			f.histTokensRead += cv.hist
			from = cv.hist
		case done:
			f.histTokensRecomputed += cv.hist
		default:
			if cv.hist >= c.readers[0].Threshold() {
				f.histFailed++ // a completion-only load that failed is counted below the threshold
			}
			f.histTokensRecomputed += cv.hist
			// The blocks may hold part of a failed READ: hand them back and
			// recompute into others (a late write shows as lost poison).
			pm.giveBack(cv.pblocks)
			blocks, bad, ok := pm.take(t, len(cv.pblocks), "a recompute")
			require.True(t, ok)
			f.writesAfterRelease += bad
			cv.pblocks = blocks
		}
	}
	write(pm.bufs, pm.ls, cv.seed, cv.pblocks, from, cv.prompt)
	key := fmt.Sprintf("c%d-t%d", cv.n, cv.turn)
	cv.hp = c.finishTurn(key, cv.pblocks)
	hold(pholds, key, cv.pblocks, len(c.prods))
	if rng.Float64() < 0.03 {
		for _, p := range c.prods {
			require.NoError(t, p.Abort(key))
		}
	}
	cv.pblocks, cv.hist, cv.abortAt = nil, 0, time.Time{}
	for i := range cv.got {
		cv.got[i], cv.ends[i] = false, connector.Result{}
	}
	cv.stage = stLoadTurn
	cv.at = time.Now()
	if rng.Float64() < 0.1 {
		cv.at = cv.at.Add(200*time.Millisecond + time.Duration(rng.Int64N(int64(200*time.Millisecond))))
	}
}

func allGot(got []bool) bool {
	for _, g := range got {
		if !g {
			return false
		}
	}
	return true
}

func allDone(rs []connector.Result) bool {
	for _, r := range rs {
		if r.Err != nil {
			return false
		}
	}
	return true
}

// holderStepAt decides whether a load just started gets a step of its
// holder's clock while its READs may be in flight (one in forty, within the
// fabric's 5 ms transfer latency), and when.
func holderStepAt(rng *rand.Rand, now time.Time) time.Time {
	if rng.IntN(40) != 0 { // a step fails most other holds of the engine too
		return time.Time{}
	}
	return now.Add(time.Duration(rng.Int64N(int64(4 * time.Millisecond))))
}
