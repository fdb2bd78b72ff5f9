package pullconn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// The fault campaign drives one prefill and one decode engine the way a
// serving engine does (one step loop that finishes requests, loads them,
// drains results and frees blocks) through seeded faults, and checks every
// byte of every request that ends done. Set GONIXL_CAMPAIGN=long for the
// figures in the README (5 seeds x 2000 requests x 3 TP pairings).

const poison = 0xEE

type campaignFigures struct {
	requests, done, failed, expired, aborted int
	wrongBytes, writesAfterRelease           int
	// The second round's attacks: clock steps, forged Params (never done),
	// Params replayed to a second decode engine (done only with the right
	// bytes), and how the refused ones ended.
	steps, forged, forgedDone, replayed, replayDone, notHeld int
	// Staged campaigns: requests whose gather failed on some prefill rank
	// while another rank's Params went to decode (never done), and those
	// of them done.
	gatherFailed, gatherFailedDone int
}

func (f *campaignFigures) add(o campaignFigures) {
	f.requests += o.requests
	f.done += o.done
	f.failed += o.failed
	f.expired += o.expired
	f.aborted += o.aborted
	f.wrongBytes += o.wrongBytes
	f.writesAfterRelease += o.writesAfterRelease
	f.steps += o.steps
	f.forged += o.forged
	f.forgedDone += o.forgedDone
	f.replayed += o.replayed
	f.replayDone += o.replayDone
	f.notHeld += o.notHeld
	f.gatherFailed += o.gatherFailed
	f.gatherFailedDone += o.gatherFailedDone
}

func (f campaignFigures) String() string {
	return fmt.Sprintf("%d requests: %d done, %d failed (%d expired, %d aborted, %d not held); wrong bytes in done results: %d; writes after release: %d; "+
		"%d clock steps, %d forged loads (%d done), %d replays to a second engine (%d done), %d loads of requests whose gather failed on a prefill rank (%d done)",
		f.requests, f.done, f.failed, f.expired, f.aborted, f.notHeld, f.wrongBytes, f.writesAfterRelease, f.steps, f.forged, f.forgedDone, f.replayed, f.replayDone,
		f.gatherFailed, f.gatherFailedDone)
}

// steppedClock is the system clock with an offset the campaign steps
// either way, as an operator or NTP steps a host's clock. Its readings
// carry no monotonic part, so the steps show in every comparison.
type steppedClock struct{ off atomic.Int64 }

func (s *steppedClock) Now() time.Time       { return time.Now().Round(0).Add(time.Duration(s.off.Load())) }
func (s *steppedClock) Step(d time.Duration) { s.off.Add(int64(d)) }

func TestFaultCampaign(t *testing.T) {
	seeds, requests := 2, 150
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, requests = 5, 2000
	}
	var total campaignFigures
	// The last shape has an HND prefill read into an NHD decode (the
	// descriptors permute every token and head).
	for _, pair := range []struct {
		p, d  int
		order string // decode's block order; prefill's is HND
	}{{2, 2, ""}, {2, 1, ""}, {1, 2, ""}, {2, 1, descriptors.OrderNHD}} {
		for seed := 1; seed <= seeds; seed++ {
			name := fmt.Sprintf("tp%d-to-tp%d/seed%d", pair.p, pair.d, seed)
			if pair.order != "" {
				name = fmt.Sprintf("tp%d-to-tp%d/HND-to-%s/seed%d", pair.p, pair.d, pair.order, seed)
			}
			t.Run(name, func(t *testing.T) {
				f := runCampaign(t, uint64(seed), pair.p, pair.d, requests, campaignMode{decodeOrder: pair.order})
				t.Logf("%s: %v", name, f)
				total.add(f)
			})
		}
	}
	t.Logf("pull campaign total: %v", total)
}

// TestFaultCampaignVLLM is the campaign with both engines in vLLM's
// protocol: the same faults, lease expiries, aborts and disconnects, and
// every byte of every done result checked; the second round's attacks are
// left out (campaignMode).
func TestFaultCampaignVLLM(t *testing.T) {
	seeds, requests := 1, 150
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, requests = 5, 2000
	}
	var total campaignFigures
	for _, pair := range []struct{ p, d int }{{2, 2}, {2, 1}, {1, 2}} {
		for seed := 1; seed <= seeds; seed++ {
			name := fmt.Sprintf("tp%d-to-tp%d/vllm/seed%d", pair.p, pair.d, seed)
			t.Run(name, func(t *testing.T) {
				f := runCampaign(t, uint64(seed), pair.p, pair.d, requests, campaignMode{vllm: true})
				t.Logf("%s: %v", name, f)
				total.add(f)
			})
		}
	}
	t.Logf("pull vLLM-protocol campaign total: %v", total)
}

// TestFaultCampaignStaged is the campaign with staging on every rank (4
// slots each, so some requests find none and are read directly): the same
// faults and guarantees: with chunked READs (like blocks, 1 -> 1), whole
// planned ones (1 -> 2), and a prefill engine of two ranks (2 -> 1, with
// ParamsAfterAllRanks).
func TestFaultCampaignStaged(t *testing.T) {
	seeds, requests := 1, 150
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, requests = 5, 2000
	}
	var total campaignFigures
	for _, pair := range []struct{ p, d int }{{1, 1}, {1, 2}, {2, 1}} {
		for k := range seeds {
			seed := uint64(7 + 100*k)
			name := fmt.Sprintf("tp%d-to-tp%d/staged/seed%d", pair.p, pair.d, seed)
			t.Run(name, func(t *testing.T) {
				m := newStagingMem(t, connector.StagingOn, 4, 256<<10)
				// Every 23rd copy fails: gathers on prefill (one rank of
				// several may fail while another's Params reach decode)
				// and scatters on decode.
				cc := &stagingtest.Copier{FailEvery: 23}
				m.copier["prefill"], m.copier["decode"] = cc, cc
				f := runCampaign(t, seed, pair.p, pair.d, requests, campaignMode{staged: m})
				if cc.Count() == 0 {
					t.Fatal("the campaign staged nothing")
				}
				t.Logf("%d gathers and scatters", cc.Count())
				t.Logf("%s: %v", name, f)
				total.add(f)
			})
		}
	}
	t.Logf("pull staged campaign total: %v", total)
	if total.wrongBytes != 0 || total.writesAfterRelease != 0 {
		t.Fatalf("staged campaign: %d wrong-byte done results, %d writes after release", total.wrongBytes, total.writesAfterRelease)
	}
}

// campaignReq is one request's life in the campaign engine.
type campaignReq struct {
	seed       int
	id, did    string
	pblocks    []int
	dblocks    []int
	params     Params
	loadAt     time.Time
	abortAt    time.Time
	loaded     bool
	waited     bool
	ended      []int // results per decode rank
	want       []int // loads per decode rank
	freed      []int // DrainFreed per prefill rank
	prefillOut bool  // prefill blocks back in the free list
	// gatherFailed: a prefill rank's gather failed in RequestFinished
	// (it holds nothing); decode still got another rank's Params.
	gatherFailed bool
	decodeOut    bool
}

// campaignMode is what a campaign runs beside its faults: staging on every
// rank, or vLLM's protocol, which defends none of the second round's
// attacks (no pins: a clock step, forged or replayed Params may give a done
// result on wrong bytes against it, docs/vllm.md), so they are left out.
type campaignMode struct {
	staged *stagingMem
	vllm   bool
	// decodeOrder is decode's block order ("" HND; prefill's stays HND).
	decodeOrder string
}

func runCampaign(t *testing.T, seed uint64, ptp, dtp, n int, mode campaignMode) campaignFigures {
	const lease = 200 * time.Millisecond
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	pclk, dclk := &steppedClock{}, &steppedClock{}
	c := newCluster(t, clusterOpts{
		prefill: side{ptp, 16}, decode: side{dtp, 16}, vllm: mode.vllm, decodeOrder: mode.decodeOrder,
		fabric: []loopback.FabricOption{loopback.WithSeed(seed), loopback.WithModel(loopback.FixedLatency(time.Millisecond))},
		prefillCfg: func(rc *Config) {
			// Every prefill rank finishes a request before its Params are used.
			rc.ParamsAfterAllRanks = true
			rc.Clock = pclk
			rc.Lease = lease
			rc.HeartbeatExtension = lease * 2 / 3
			if mode.staged != nil {
				mode.staged.rank("prefill", nil)(rc)
			}
		},
		decodeCfg: func(rc *Config) {
			rc.Clock = dclk
			rc.Lease = lease
			rc.HeartbeatInterval = lease / 6
			rc.TransferTimeout = 100 * time.Millisecond
			rc.ExpiryMargin = 20 * time.Millisecond
			rc.Inline = seed%2 == 0
			if seed%3 == 0 {
				rc.FailurePolicy = connector.PolicyRecompute
			}
			if mode.staged != nil {
				mode.staged.rank("decode", nil)(rc)
			}
		},
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
	// Decode engine B, one rank: Params replayed to it after engine A read
	// them (a proxy retrying the decode leg elsewhere).
	b := c.secondDecode(t, "decode-b")
	bl := newLayout(b.buf, 0, 1, 16)
	fillAll(b.buf, poison)
	bfree := newFreeList(testBlocks)
	type attackLoad struct {
		did     string
		dblocks []int
		seed    int // the bytes a done result must carry; -1: must not be done
		ended   []int
		want    []int // 1 on the ranks that took the load
		onB     bool
	}
	attacks := map[string]*attackLoad{}
	pfree := newFreeList(testBlocks)
	dfree := newFreeList(testBlocks)
	for r := range c.pbufs {
		fillAll(c.pbufs[r], poison)
	}
	for r := range c.dbufs {
		fillAll(c.dbufs[r], poison)
	}
	var f campaignFigures
	f.requests = n
	reqs := map[string]*campaignReq{}     // by prefill id
	byDecode := map[string]*campaignReq{} // by decode id
	next, live := 0, 0
	disconnectAt := n / 2
	deadline := time.Now().Add(2 * time.Minute)
	for (next < n || live > 0 || len(attacks) > 0) && time.Now().Before(deadline) {
		now := time.Now()
		// Admit: the engine finishes prefill of a new request when blocks
		// are free on both sides.
		if next < n && live < 24 {
			nb := 1 + rng.IntN(3)
			pb, ok1 := pfree.take(nb)
			db, ok2 := dfree.take(nb)
			if ok1 && ok2 {
				r := &campaignReq{seed: int(seed)*1_000_000 + next, id: fmt.Sprintf("req-%d", next), did: fmt.Sprintf("dreq-%d", next), pblocks: pb, dblocks: db,
					ended: make([]int, dtp), want: make([]int, dtp), freed: make([]int, ptp)}
				for i := range r.want {
					r.want[i] = 1
				}
				f.writesAfterRelease += c.checkPoison(c.dbufs, c.dlayouts, db, "decode", r.did)
				c.fill(r.seed, pb, nb*16)
				finished := 0
				for i, p := range c.prods {
					par, err := p.RequestFinished(r.id, pb)
					if mode.staged != nil && errors.Is(err, connector.ErrStaging) {
						// Nothing held on this rank: nothing to free.
						r.freed[i], r.gatherFailed = 1, true
						continue
					}
					require.NoError(t, err)
					if finished == 0 {
						r.params = par
					}
					finished++
				}
				if finished == 0 {
					// Failed on every rank: the engine recomputes; no load.
					r.loaded = true
					clear(r.want)
				} else if r.gatherFailed {
					f.gatherFailed++
				}
				switch x := rng.Float64(); {
				case x < 0.65:
					r.loadAt = now
				case x < 0.85:
					r.loadAt = now.Add(time.Duration(rng.Int64N(int64(lease / 2))))
				default:
					r.loadAt = now.Add(lease + time.Duration(rng.Int64N(int64(lease))))
				}
				if rng.Float64() < 0.2 && finished > 0 {
					r.waited = true
					for _, cn := range c.cons {
						require.NoError(t, cn.KeepAlive(r.did, r.params))
					}
				}
				if rng.Float64() < 0.05 {
					r.abortAt = r.loadAt.Add(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
				}
				if rng.Float64() < 0.03 {
					for _, p := range c.prods {
						require.NoError(t, p.Abort(r.id))
					}
				}
				reqs[r.id], byDecode[r.did] = r, r
				if next%53 == 26 && !mode.vllm {
					// A step of one engine's clock, either way, by up to
					// 1.5 leases: holds end early or late on prefill, and
					// decode's view of their deadlines goes wrong.
					d := time.Duration(rng.Int64N(int64(3*lease))) - 3*lease/2
					if rng.IntN(2) == 0 {
						pclk.Step(d)
					} else {
						dclk.Step(d)
					}
					f.steps++
				}
				if rng.Float64() < 0.03 && finished > 0 && !mode.vllm {
					// Forged Params: an id prefill never finished, or the
					// request's id with other blocks. Never done.
					fp := r.params
					fp.RemoteBlockIDs = slices.Clone(fp.RemoteBlockIDs)
					if rng.IntN(2) == 0 {
						fp.RemoteRequestID = fmt.Sprintf("never-%d", next)
					} else {
						for i := range fp.RemoteBlockIDs {
							fp.RemoteBlockIDs[i] = (fp.RemoteBlockIDs[i] + 1 + rng.IntN(testBlocks-1)) % testBlocks
						}
					}
					// On engine B, which has no load of that request to
					// guard it.
					if fb, ok := bfree.take(nb); ok {
						a := &attackLoad{did: fmt.Sprintf("forged-%d", next), dblocks: fb, seed: -1, ended: make([]int, 1), want: []int{1}, onB: true}
						f.writesAfterRelease += c.checkPoisonIn(b.buf, &bl, fb, a.did)
						require.NoError(t, b.cons.Load(a.did, fp, fb))
						attacks[a.did] = a
						f.forged++
					}
				}
				next++
				live++
				if next == disconnectAt {
					require.NoError(t, c.fab.Disconnect("prefill-0"))
					time.AfterFunc(20*time.Millisecond, func() { _ = c.fab.Reconnect("prefill-0") })
				}
			} else {
				pfree.give(pb)
				dfree.give(db)
			}
		}
		for _, r := range byDecode {
			if !r.loaded && !now.Before(r.loadAt) {
				r.loaded = true
				for _, cn := range c.cons {
					require.NoError(t, cn.Load(r.did, r.params, r.dblocks))
				}
				if rng.Float64() < 0.03 {
					// Refused while the first is live; accepted (and so
					// ending once more) if it already ended.
					if err := c.cons[0].Load(r.did, r.params, r.dblocks); err == nil {
						r.want[0]++
					} else {
						require.ErrorIs(t, err, connector.ErrInvalid, "a second Load of a live id")
					}
				}
			}
			if r.loaded && !r.abortAt.IsZero() && !now.Before(r.abortAt) {
				r.abortAt = time.Time{}
				for _, cn := range c.cons {
					require.NoError(t, cn.Abort(r.did))
					require.NoError(t, cn.Abort(r.did))
				}
			}
		}
		// The attackers' results: forged loads are never done; a replay is
		// done only with the request's bytes.
		drainAttack := func(rank int, res connector.Result) {
			a := attacks[res.RequestID]
			require.NotNil(t, a, "result for unknown request %q", res.RequestID)
			a.ended[rank]++
			require.LessOrEqual(t, a.ended[rank], a.want[rank], "%s ended more often than loaded on rank %d", a.did, rank)
			buf, l := b.buf, &bl
			if !a.onB {
				buf, l = c.dbufs[rank], &c.dlayouts[rank]
			}
			if res.Err == nil {
				if a.seed < 0 {
					f.forgedDone++
					t.Errorf("forged load %s done on decode rank %d", a.did, rank)
				} else {
					f.replayDone++
					f.wrongBytes += c.checkBytes(buf, l, a.dblocks, a.seed, a.did)
				}
			} else if errors.Is(res.Err, ErrNotHeld) {
				f.notHeld++
			}
			c.poisonBlocks(buf, l, a.dblocks)
			if slices.Equal(a.ended, a.want) {
				if a.onB {
					bfree.give(a.dblocks)
				} else {
					dfree.give(a.dblocks)
				}
				delete(attacks, a.did)
			}
		}
		// The engine step: results and freed blocks.
		for rank, cn := range c.cons {
			for _, res := range cn.Drain() {
				if attacks[res.RequestID] != nil {
					drainAttack(rank, res)
					continue
				}
				r := byDecode[res.RequestID]
				require.NotNil(t, r, "result for unknown request %q", res.RequestID)
				r.ended[rank]++
				require.LessOrEqual(t, r.ended[rank], r.want[rank], "request %s ended more often than loaded on decode rank %d", r.did, rank)
				if res.Err == nil && r.gatherFailed {
					f.gatherFailedDone++
					t.Errorf("request %s done on decode rank %d though prefill rank's gather failed", r.did, rank)
				}
				switch {
				case res.Err == nil:
					f.wrongBytes += c.checkRequest(rank, r)
				case rank > 0:
				case errors.Is(res.Err, ErrExpired):
					f.expired++
				case errors.Is(res.Err, connector.ErrAborted):
					f.aborted++
				}
				if res.Err == nil && rank == 0 {
					f.done++
				} else if res.Err != nil && rank == 0 {
					f.failed++
				}
				if res.Err != nil && rank == 0 && errors.Is(res.Err, ErrNotHeld) {
					f.notHeld++
				}
				if res.Err == nil && rank == 0 && rng.Float64() < 0.05 && !mode.vllm {
					if bb, ok := bfree.take(len(r.dblocks)); ok {
						a := &attackLoad{did: "replay-" + r.did, dblocks: bb, seed: r.seed, ended: make([]int, 1), want: []int{1}, onB: true}
						f.writesAfterRelease += c.checkPoisonIn(b.buf, &bl, bb, a.did)
						// Refused while B still loads a forged copy of the
						// same remote request, or a replay of an earlier
						// result of this request (its guard).
						if err := b.cons.Load(a.did, r.params, bb); err != nil {
							require.ErrorIs(t, err, connector.ErrInvalid)
							bfree.give(bb)
						} else {
							attacks[a.did] = a
							f.replayed++
						}
					}
				}
				// The engine takes the blocks back once the rank's last load
				// of them ended: poison them, so a late write shows. (With a
				// second load of the same blocks accepted on this rank, the
				// first result does not hand them back: poisoning then would
				// overwrite what the second READ brought.)
				if r.ended[rank] == r.want[rank] {
					c.poisonBlocks(c.dbufs[rank], &c.dlayouts[rank], r.dblocks)
				}
			}
		}
		for _, res := range b.cons.Drain() {
			drainAttack(0, res)
		}
		for rank, p := range c.prods {
			for _, id := range p.DrainFreed() {
				r := reqs[id]
				require.NotNil(t, r, "freed unknown request %q", id)
				r.freed[rank]++
				require.Equal(t, 1, r.freed[rank], "request %s freed twice on prefill rank %d", id, rank)
			}
		}
		for id, r := range reqs {
			if !r.prefillOut && allOnce(r.freed) {
				r.prefillOut = true
				for rank := range c.pbufs {
					c.poisonBlocks(c.pbufs[rank], &c.playouts[rank], r.pblocks)
				}
				pfree.give(r.pblocks)
			}
			if !r.decodeOut && slices.Equal(r.ended, r.want) {
				r.decodeOut = true
				dfree.give(r.dblocks)
			}
			if r.prefillOut && r.decodeOut {
				delete(reqs, id)
				delete(byDecode, r.did)
				live--
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	require.Zero(t, live, "%d requests did not end in time", live)
	for _, a := range attacks {
		require.Equal(t, a.want, a.ended, "%s did not end in time", a.did)
	}
	require.Zero(t, f.forgedDone, "forged loads done")
	for r, cn := range c.cons {
		require.Empty(t, cn.Drain(), "decode rank %d: a result after every request ended", r)
	}
	// Blocks back in the free lists must still hold poison: nothing wrote
	// into them after they were handed back.
	f.writesAfterRelease += c.checkPoison(c.dbufs, c.dlayouts, dfree.all(), "decode", "end of run")
	require.Zero(t, f.wrongBytes, "done results with wrong bytes")
	require.Zero(t, f.writesAfterRelease, "writes into decode blocks after they were handed back")
	return f
}

func allOnce(counts []int) bool {
	for _, n := range counts {
		if n != 1 {
			return false
		}
	}
	return true
}

// checkRequest counts the wrong bytes of request r in decode rank's memory.
func (c *cluster) checkRequest(rank int, r *campaignReq) int {
	return c.checkBytes(c.dbufs[rank], &c.dlayouts[rank], r.dblocks, r.seed, fmt.Sprintf("%s on decode rank %d", r.did, rank))
}

// checkBytes counts the bytes of blocks in buf that are not request seed's,
// reporting them as what's.
func (c *cluster) checkBytes(buf *nixl.Buffer, l *descriptors.Layout, blocks []int, seed int, what string) int {
	wrong := 0
	for g := 0; g < l.NumRegions(); g++ {
		for h := 0; h < l.KVHeads; h++ {
			for tok := 0; tok < len(blocks)*l.BlockSize; tok++ {
				got := tokenBytes(buf, l, blocks, 0, g, h, tok)
				for i := range got {
					if got[i] != value(seed, g, l.FirstHead()+h, tok, i) {
						wrong++
					}
				}
			}
		}
	}
	if wrong > 0 {
		c.t.Errorf("request %s done with %d wrong bytes", what, wrong)
	}
	return wrong
}

func (c *cluster) checkPoisonIn(buf *nixl.Buffer, l *descriptors.Layout, blocks []int, when string) int {
	return c.checkPoison([]*nixl.Buffer{buf}, []descriptors.Layout{*l}, blocks, "decode engine B", when)
}

func (c *cluster) poisonBlocks(buf *nixl.Buffer, l *descriptors.Layout, blocks []int) {
	b := buf.Bytes()
	for g := 0; g < l.NumRegions(); g++ {
		for _, blk := range blocks {
			off := uint64(g)*l.RegionLen() + uint64(blk)*l.BlockLen()
			for i := range l.BlockLen() {
				b[off+i] = poison
			}
		}
	}
}

// checkPoison counts the blocks (per rank) that no longer hold poison.
func (c *cluster) checkPoison(bufs []*nixl.Buffer, ls []descriptors.Layout, blocks []int, side, when string) int {
	bad := 0
	for r, buf := range bufs {
		l := &ls[r]
		b := buf.Bytes()
		for g := 0; g < l.NumRegions(); g++ {
			for _, blk := range blocks {
				off := uint64(g)*l.RegionLen() + uint64(blk)*l.BlockLen()
				for i := range l.BlockLen() {
					if b[off+i] != poison {
						bad++
						c.t.Errorf("%s rank %d block %d was written after it was handed back (%s)", side, r, blk, when)
						break
					}
				}
			}
		}
	}
	return bad
}

func fillAll(buf *nixl.Buffer, v byte) {
	b := buf.Bytes()
	for i := range b {
		b[i] = v
	}
}

// freeList is an engine's block allocator: blocks come back in any order,
// so requests get scattered blocks that earlier requests used.
type freeList struct{ ids []int }

func newFreeList(n int) *freeList {
	f := &freeList{}
	for i := range n {
		f.ids = append(f.ids, i)
	}
	return f
}

func (f *freeList) take(n int) ([]int, bool) {
	if len(f.ids) < n {
		return nil, false
	}
	out := append([]int(nil), f.ids[len(f.ids)-n:]...)
	f.ids = f.ids[:len(f.ids)-n]
	return out, true
}

func (f *freeList) give(ids []int) { f.ids = append(f.ids, ids...) }

func (f *freeList) all() []int { return append([]int(nil), f.ids...) }
