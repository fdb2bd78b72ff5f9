package pushconn

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
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/lease"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// The fault campaign: seeded runs of many requests through one prefill
// and one decode engine on a loopback fabric that fails posts and
// transfers in flight, drops and delays notifications and disconnects
// agents, while the test itself duplicates registrations, aborts requests
// on either side, retries them under new suffixes, lets leases run out and
// closes a prefill rank near the end. A quarter of the registrations go
// without registration_seq (as vLLM's decode sends them), 5% of all
// PUSH_REGs arrive a second time some 30 ms later (campaignNet), a fifth of
// the requests take 20-80 ms on prefill (a quarter of those are aborted by
// decode meanwhile, so registrations are cancelled while they wait), and a
// tenth reuse the ids of an earlier request that ended done: each of those
// gets late copies of the completions prefill sent for the earlier ones.
// Prefill fills each request's blocks
// with the request's own pattern; decode poisons blocks as soon as the
// engine gets them back (a failed connector.Result, or a done one once checked) and
// reuses them for later requests, so a WRITE that lands after the release
// either spoils the poison (found when the block is taken again or at the
// end) or another request's bytes (found by that request's check).
//
// GONIXL_CAMPAIGN=long runs 5 seeds x 2000 requests per pairing; the
// default is 2 seeds x 300.

type campaignFigures struct {
	requests, retries, done, failed, aborted int
	wrongBytes, writesAfterRelease           int
	decodeResultsTwice, prefillFreeTwice     int
	missingResults, missingFrees             int
	// seqless: requests registered without registration_seq; reused:
	// requests under an earlier request's ids; completionCopies: late
	// copies of earlier completions delivered to them; regCopies: PUSH_REGs
	// delivered a second time.
	seqless, reused, completionCopies, regCopies int
	// cancelTimeouts: failed requests whose blocks decode released at
	// CancelTimeout without every prefill rank's answer (the documented
	// remaining risk: a rank still alive may write after that).
	cancelTimeouts int
	// progressWrites: progressive WRITEs prefill posted (progressive
	// campaign), progressStaged those of them into decode's staging slot,
	// progressDeferred the staged parts put off for want of a slot.
	progressWrites, progressStaged, progressDeferred int
	// layerReports: per-layer reports prefill ranks took (a third of the
	// progressive requests report per layer, writelayers.go).
	layerReports int
	// partsScattered: staged parts decode scattered as they landed
	// (PUSH_STAGED_PART); partsDropped those of requests decode no longer
	// held, partsRejected those that did not fit.
	partsScattered, partsDropped, partsRejected int
	// slotsLeft: staging slots still held on any rank once every request
	// ended (staged campaigns).
	slotsLeft int
}

func (f *campaignFigures) add(o campaignFigures) {
	f.requests += o.requests
	f.retries += o.retries
	f.seqless += o.seqless
	f.reused += o.reused
	f.completionCopies += o.completionCopies
	f.regCopies += o.regCopies
	f.cancelTimeouts += o.cancelTimeouts
	f.progressWrites += o.progressWrites
	f.progressStaged += o.progressStaged
	f.progressDeferred += o.progressDeferred
	f.layerReports += o.layerReports
	f.partsScattered += o.partsScattered
	f.partsDropped += o.partsDropped
	f.partsRejected += o.partsRejected
	f.slotsLeft += o.slotsLeft
	f.done += o.done
	f.failed += o.failed
	f.aborted += o.aborted
	f.wrongBytes += o.wrongBytes
	f.writesAfterRelease += o.writesAfterRelease
	f.decodeResultsTwice += o.decodeResultsTwice
	f.prefillFreeTwice += o.prefillFreeTwice
	f.missingResults += o.missingResults
	f.missingFrees += o.missingFrees
}

func TestFaultCampaign(t *testing.T) {
	seeds, n := 2, 300
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, n = 5, 2000
	}
	if testing.Short() {
		seeds, n = 1, 100
	}
	start := time.Now()
	var total campaignFigures
	// The last shape has an NHD prefill writing into an HND decode (the
	// descriptors permute every token and head).
	shapes := []struct {
		tp    [2]int
		order string // prefill's block order; decode's is HND
	}{{[2]int{2, 2}, ""}, {[2]int{2, 1}, ""}, {[2]int{1, 2}, ""}, {[2]int{1, 2}, descriptors.OrderNHD}}
	for _, sh := range shapes {
		tp := sh.tp
		var pair campaignFigures
		name, base := "", uint64(0)
		if sh.order != "" {
			name, base = "/"+sh.order+"-to-HND", 5000
		}
		for s := range seeds {
			seed := base + uint64(1000*tp[0]+100*tp[1]+s+1)
			if only := os.Getenv("GONIXL_CAMPAIGN_SEED"); only != "" && only != fmt.Sprint(seed) {
				continue
			}
			t.Run(fmt.Sprintf("tp%dto%d%s/seed%d", tp[0], tp[1], name, seed), func(t *testing.T) {
				f := runCampaignWith(t, seed, n, tp[0], tp[1], campaignOpts{preOrder: sh.order})
				pair.add(f)
				t.Logf("seed %d: %+v", seed, f)
			})
		}
		t.Logf("push campaign TP %d -> %d%s: %d seeds x %d requests (+%d retries; %d seq-less, %d reusing an id, %d completion copies, %d PUSH_REG copies): %d done, %d failed (%d aborted), %d wrong-byte done results, %d writes after release, %d results or frees twice, %d missing",
			tp[0], tp[1], name, seeds, n, pair.retries, pair.seqless, pair.reused, pair.completionCopies, pair.regCopies, pair.done, pair.failed, pair.aborted, pair.wrongBytes, pair.writesAfterRelease,
			pair.decodeResultsTwice+pair.prefillFreeTwice, pair.missingResults+pair.missingFrees)
		total.add(pair)
	}
	t.Logf("push campaign total: %d requests (%d seeds x %d x 4 shapes, %d retries; %d seq-less, %d reusing an id, %d completion copies, %d PUSH_REG copies) in %v: %d done, %d failed (%d aborted), %d wrong-byte done results, %d writes after release",
		total.requests, seeds, n, total.retries, total.seqless, total.reused, total.completionCopies, total.regCopies, time.Since(start).Round(time.Millisecond),
		total.done, total.failed, total.aborted, total.wrongBytes, total.writesAfterRelease)
	total.requireHeld(t)
	if os.Getenv("GONIXL_CAMPAIGN_SEED") == "" {
		require.Positive(t, total.seqless, "no seq-less registrations")
		require.Positive(t, total.completionCopies, "no late completion copies")
		require.Positive(t, total.regCopies, "no PUSH_REG copies")
	}
}

// TestFaultCampaignProgressive is the campaign with progressive push:
// prefill reports each request's blocks final in one to three steps before
// it finishes (Producer.Progress), filling each block with its bytes only
// when it reports it; a third of the requests report per layer (the 4
// layers' ranks: each chunk in its first 1 to 3 layers, once or twice,
// then in every layer, the last chunk perhaps the whole prompt until the
// finish), a layer's bytes filled only when reported; a tenth of the requests that report are aborted
// by prefill between a report and the finish. The same faults, the same
// guarantees: 0 done results with a wrong byte (a block written before it
// was final, or a completion before a progressive WRITE landed), 0 writes
// after release (a progressive WRITE landing after a cancel's ack, a
// PUSH_FAIL or the free). GONIXL_CAMPAIGN=long runs 5 seeds x 2000
// requests per pairing.
func TestFaultCampaignProgressive(t *testing.T) {
	seeds, n := 1, 300
	if testing.Short() {
		n = 100
	}
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, n = 5, 2000
	}
	var total campaignFigures
	for _, tp := range [][2]int{{2, 2}, {2, 1}, {1, 2}} {
		for k := range seeds {
			seed := uint64(7000 + 100*tp[0] + tp[1] + 1000*k)
			t.Run(fmt.Sprintf("tp%dto%d/seed%d", tp[0], tp[1], seed), func(t *testing.T) {
				f := runCampaignWith(t, seed, n, tp[0], tp[1], campaignOpts{progressive: true})
				t.Logf("seed %d: %+v", seed, f)
				total.add(f)
			})
		}
	}
	t.Logf("push progressive campaign total: %+v", total)
	require.Positive(t, total.progressWrites, "no progressive WRITE")
	require.Positive(t, total.layerReports, "no per-layer report")
	total.requireHeld(t)
}

// TestFaultCampaignStaged is the campaign with staging on every rank (4
// slots each, so some requests find none and go direct): the same faults,
// the same guarantees, and the slots all come back. Its WRITEs are
// chunked (one chunk per region): by block ids (TP 2 -> 2) and by planned
// segments (2 -> 1, 1 -> 2). GONIXL_CAMPAIGN=long runs 5 seeds x 2000
// requests per pairing.
func TestFaultCampaignStaged(t *testing.T) {
	n, seeds := 300, 1
	if testing.Short() {
		n = 100
	}
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		n, seeds = 2000, 5
	}
	var total campaignFigures
	for _, tp := range [][2]int{{2, 2}, {2, 1}, {1, 2}} {
		for k := range seeds {
			seed := uint64(5000 + 100*tp[0] + tp[1] + 1000*k)
			t.Run(fmt.Sprintf("tp%dto%d/seed%d", tp[0], tp[1], seed), func(t *testing.T) {
				m := newStagingMem(t, connector.StagingOn, 4, 256<<10)
				cc := &stagingtest.Copier{}
				m.copier = func(string) connector.Copier { return cc }
				f := runCampaign(t, seed, n, tp[0], tp[1], m)
				t.Logf("seed %d: %+v; %d gathers and scatters", seed, f, cc.Count())
				require.Positive(t, cc.Count(), "the campaign staged nothing")
				require.Positive(t, f.completionCopies, "no late completion copies")
				total.add(f)
			})
		}
	}
	t.Logf("push staged campaign total: %+v", total)
	require.Zero(t, total.slotsLeft, "staging slots never given back")
	total.requireHeld(t)
}

// TestFaultCampaignProgressiveStaged is the progressive campaign with
// staging on every rank (4 slots each, so some parts are put off and some
// finals find no slot): TP 2 -> 2 and 1 -> 1 write their parts into
// decode's slot (blocks one to one), 2 -> 1 into decode's blocks (prefill
// holds half the heads). The same faults, the same guarantees, and every
// slot comes back. GONIXL_CAMPAIGN=long runs 5 seeds x 2000 requests per
// pairing.
func TestFaultCampaignProgressiveStaged(t *testing.T) {
	seeds, n := 1, 300
	if testing.Short() {
		n = 100
	}
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, n = 5, 2000
	}
	var total campaignFigures
	for _, tp := range [][2]int{{2, 2}, {1, 1}, {2, 1}} {
		for k := range seeds {
			seed := uint64(9000 + 100*tp[0] + tp[1] + 1000*k)
			t.Run(fmt.Sprintf("tp%dto%d/seed%d", tp[0], tp[1], seed), func(t *testing.T) {
				m := newStagingMem(t, connector.StagingOn, 4, 256<<10)
				cc := &stagingtest.Copier{}
				m.copier = func(string) connector.Copier { return cc }
				f := runCampaignWith(t, seed, n, tp[0], tp[1], campaignOpts{progressive: true, staged: []*stagingMem{m}})
				t.Logf("seed %d: %+v; %d gathers and scatters", seed, f, cc.Count())
				if tp[0] == tp[1] {
					require.Positive(t, f.progressStaged, "no staged part")
					require.Positive(t, f.partsScattered, "no staged part scattered as it landed")
				}
				total.add(f)
			})
		}
	}
	t.Logf("push progressive staged campaign total: %+v", total)
	require.Positive(t, total.progressWrites, "no progressive WRITE")
	require.Positive(t, total.layerReports, "no per-layer report")
	require.Zero(t, total.slotsLeft, "staging slots never given back")
	total.requireHeld(t)
}

// campaign request: one attempt of one request, on every rank.
type creq struct {
	n              int // pattern seed
	decID, preID   string
	tid            string
	dblocks        []int
	pblocks        []int
	regAt, finAt   time.Time
	abortDecAt     time.Time // zero: no abort
	abortPreAt     time.Time
	dupAt          time.Time
	registered     bool
	finished       bool
	abortedDec     bool
	failed         bool // some decode rank's result failed
	abortedPre     bool
	duplicated     bool
	noRegister     bool // decode never registers: prefill's lease runs out
	seqless        bool // registered without registration_seq
	results        map[int]int
	frees          map[int]int
	decodeReleased bool
	prefillFreed   bool
	retryOf        *creq
	// reuses is the earlier request, ended done, whose ids this one
	// carries; copies lists when late copies of the completions prefill
	// sent for it (and its id's earlier requests) are delivered, and
	// regMark how many there were when this one registered.
	reuses  *creq
	copies  []time.Time
	regMark int
	// progAt are when prefill reports progress (progressive campaign), of
	// progTo[i] blocks, the blocks after progFinal final in progLayers[i]
	// layers (0: every layer, and progFinal becomes progTo[i]);
	// progressed says how many reports went.
	progAt     []time.Time
	progTo     []int
	progLayers []int
	progFinal  int
	progressed int
	progHeld   map[int]bool // prefill ranks that took a report (they hold it)
}

const campaignBlocks = 384

func runCampaign(t *testing.T, seed uint64, n, preTP, decTP int, staged ...*stagingMem) campaignFigures {
	return runCampaignWith(t, seed, n, preTP, decTP, campaignOpts{staged: staged})
}

// campaignOpts varies the campaign: staging memory on every rank, or both
// engines in vLLM's protocol.
type campaignOpts struct {
	staged []*stagingMem
	// vllm: both engines speak vLLM's protocol, so no transfer ids, no
	// registration seqs and no reuse of an id that ended done (a late copy
	// of a plain completion would count for the new request: the gap
	// docs/vllm.md names).
	vllm bool
	// pp runs prefill in pp pipeline stages of preTP ranks each.
	pp int
	// preOrder is prefill's block order ("" HND; decode's stays HND).
	preOrder string
	// progressive: prefill reports progress (Producer.Progress) while it
	// computes each request, so registrations get its final blocks early.
	progressive bool
}

func runCampaignWith(t *testing.T, seed uint64, n, preTP, decTP int, o campaignOpts) campaignFigures {
	staged := o.staged
	rng := rand.New(rand.NewPCG(seed, 7))
	var logger *zap.Logger
	fabricOpts := []loopback.FabricOption{loopback.WithSeed(seed), loopback.WithModel(loopback.FixedLatency(200 * time.Microsecond))}
	if path := os.Getenv("GONIXL_CAMPAIGN_LOG"); path != "" {
		// Every rank's debug log and the fabric's faults, to follow one
		// request when the campaign finds something.
		cfg := zap.NewDevelopmentConfig()
		cfg.OutputPaths = []string{path}
		var err error
		logger, err = cfg.Build()
		require.NoError(t, err)
		defer logger.Sync() //nolint:errcheck
		fabricOpts = append(fabricOpts, loopback.WithLogger(logger))
	}
	// The write-safety bound trusts a prefill rank to act on a cancel or
	// end its WRITE within CancelTimeout - 2 x WriteTimeout (1.5 s here;
	// production's is 10 s and more). A pause of the whole process that
	// long breaks it, so the campaign measures the longest one for its
	// report. The margin was 100 ms: the race suite beside stress-ng (load
	// 10 to 18 on 2 cores) stalled past it and the campaigns found writes
	// after release and a wrong-byte result, which a machine's speed, not
	// the protocol, decided.
	pauses := watchPauses(t)
	layers := 0 // the rig's
	if o.progressive {
		layers = 4 // per-layer reports of 1, 2 or 3 layers
	}
	net := newCampaignNet(seed, 0.05)
	r := newRig(t, rigConfig{
		preTP: preTP, decTP: decTP, prePP: o.pp, numBlocks: campaignBlocks, clock: lease.SystemClock{}, layers: layers,
		fabric: fabricOpts, wrap: net.wrap, vllm: o.vllm, preOrder: o.preOrder,
		rank: func(c *Config) {
			c.Logger = logger
			c.StatsInterval = -1
			c.IdleInterval = 2 * time.Millisecond
			c.Lease = 300 * time.Millisecond
		},
		preRank: func(c *Config) {
			c.WriteTimeout = 150 * time.Millisecond
			c.RegistrationTimeout = 600 * time.Millisecond
			if len(staged) > 0 {
				staged[0].rank("prefill")(c)
			}
		},
		decRank: func(c *Config) {
			c.RegistrationTimeout = 800 * time.Millisecond
			c.CancelTimeout = 1800 * time.Millisecond // 2 x WriteTimeout + the 1.5 s margin
			if len(staged) > 0 {
				staged[0].rank("decode")(c)
			}
		},
	})
	for _, f := range []loopback.Fault{
		{Kind: loopback.FailPost, Probability: 0.02},
		{Kind: loopback.FailInFlight, Probability: 0.02},
		{Kind: loopback.DropNotif, Probability: 0.005},
		{Kind: loopback.DelayNotif, Probability: 0.03, Delay: 20 * time.Millisecond},
	} {
		_, err := r.fabric.AddFault(f)
		require.NoError(t, err)
	}
	var fig campaignFigures
	dfree := blocksFrom(0, campaignBlocks)
	pfree := blocksFrom(0, campaignBlocks)
	for k := range decTP {
		poison(t, r.decLayout[k], dfree)
	}
	take := func(free *[]int, nb int) []int {
		if len(*free) < nb {
			return nil
		}
		i := rng.IntN(len(*free) - nb + 1)
		out := append([]int(nil), (*free)[i:i+nb]...)
		*free = append((*free)[:i], (*free)[i+nb:]...)
		return out
	}
	coords := Coordinates(r.pre)
	var live, all, retries []*creq
	var reusable []*creq     // ended done, their ids free to register again
	owner := map[int]*creq{} // decode block -> the last request that held it
	issued, next := 0, 0
	closeAt := n * 19 / 20
	closed := false
	deadline := time.Now().Add(2 * time.Minute)
	disconnectUntil := time.Time{}
	disconnected := ""
	newReq := func(now time.Time, retryOf *creq) *creq {
		nb := 1 + rng.IntN(3)
		if o.progressive {
			nb = 2 + rng.IntN(3) // something to report before the last block
		}
		if retryOf != nil {
			nb = len(retryOf.dblocks) // the same prompt, the same length
		}
		q := &creq{n: next + 1, retryOf: retryOf, results: map[int]int{}, frees: map[int]int{}}
		next++
		base := fmt.Sprintf("cmpl-%d-%d", seed, q.n)
		if retryOf != nil {
			// The same prompt: the same KV, whichever attempt's blocks
			// the stripped-id rule pairs the retry's registration with.
			base = fmt.Sprintf("cmpl-%d-%d", seed, retryOf.n)
			q.n = retryOf.n
		}
		q.decID = fmt.Sprintf("%s-%08x", base, rng.Uint32())
		q.preID = fmt.Sprintf("%s-%08x", base, rng.Uint32())
		switch rng.IntN(4) {
		case 0:
			q.preID = q.decID
		case 1:
			if !o.vllm {
				q.tid = fmt.Sprintf("tid-%d-%d", seed, q.n)
			}
		}
		switch {
		case o.vllm:
			q.seqless = true // vLLM's decode sends no seq
		case retryOf == nil && len(reusable) > 0 && rng.IntN(10) == 0:
			// The same ids again, with a seq (a seq-less registration of an
			// id already written is dropped as a duplicate, and copies of
			// plain completions would count: the documented gap).
			k := rng.IntN(len(reusable))
			q.reuses = reusable[k]
			reusable = append(reusable[:k], reusable[k+1:]...)
			q.decID, q.preID, q.tid = q.reuses.decID, q.reuses.preID, q.reuses.tid
		case rng.IntN(4) == 0:
			q.seqless = true
		}
		q.dblocks = take(&dfree, nb)
		if q.dblocks == nil {
			return nil
		}
		for k := range decTP {
			if !poisoned(t, r.decLayout[k], q.dblocks) {
				fig.writesAfterRelease++
				for _, b := range q.dblocks {
					if !poisoned(t, r.decLayout[k], []int{b}) {
						t.Logf("write after release: decode rank %d block %d, last held by %s; it holds %s", k, b, describe(owner[b]), whose(t, r.decLayout[k], b, all))
					}
				}
			}
		}
		for _, b := range q.dblocks {
			owner[b] = q
		}
		q.pblocks = take(&pfree, nb)
		if q.pblocks == nil {
			dfree = append(dfree, q.dblocks...)
			return nil
		}
		for j := range r.preLayout {
			seed := q.n
			if o.progressive {
				// Not computed yet: a block written before it was
				// reported final carries another request's pattern.
				seed = q.n + 1_000_000
			}
			fillStage(t, r.preLayout[j], q.pblocks, seed, nb*16) // fill, a stage's layers at their model regions
		}
		q.regAt = now.Add(time.Duration(rng.IntN(3000)) * time.Microsecond)
		q.finAt = now.Add(time.Duration(rng.IntN(3000)) * time.Microsecond)
		slow := rng.IntN(5) == 0
		if slow {
			// A long prompt: the registration waits for prefill, where a
			// cancel withdraws it and a late copy of it may come first.
			q.finAt = q.regAt.Add(20*time.Millisecond + time.Duration(rng.IntN(60_000))*time.Microsecond)
		}
		switch x := rng.IntN(100); {
		case x < 3:
			q.noRegister = true // prefill's lease runs out
		case x < 6:
			q.regAt = q.finAt.Add(350 * time.Millisecond) // after the lease
		case x < 9:
			q.abortDecAt = now.Add(time.Duration(rng.IntN(5000)) * time.Microsecond)
		case x < 12:
			q.abortPreAt = q.finAt.Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
		case x < 15:
			q.dupAt = q.regAt.Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
		case slow && x < 40:
			// The client goes away during a long prefill.
			q.abortDecAt = q.regAt.Add(time.Duration(rng.IntN(int(q.finAt.Sub(q.regAt)/time.Microsecond))) * time.Microsecond)
		}
		if o.vllm && !q.noRegister && rng.IntN(50) == 0 {
			// A long prefill the client leaves at once: decode cannot
			// cancel, so prefill still WRITEs, after decode's CancelTimeout
			// (400 ms) but before prefill's registration timeout (600 ms):
			// decode must hold the blocks past the cancel timeout.
			q.finAt = q.regAt.Add(450*time.Millisecond + time.Duration(rng.IntN(100_000))*time.Microsecond)
			q.abortDecAt = q.regAt.Add(time.Duration(rng.IntN(5000)) * time.Microsecond)
		}
		if o.progressive {
			// Reports between now and the finish, each of more blocks;
			// a tenth of the requests are aborted by prefill between two.
			span := max(q.finAt.Sub(now), time.Millisecond)
			m := 0
			if layers := r.preLayout[0].NumLayers; rng.IntN(3) == 0 {
				// Per layer: each chunk in one or two reports of its first
				// layers, then in every layer, except the last chunk,
				// which may be the whole prompt: RequestFinished ends it.
				for m < nb {
					m += 1 + rng.IntN(nb-m)
					for l := 0; l < layers-1 && (l == 0 || rng.IntN(2) == 0); {
						l += 1 + rng.IntN(layers-1-l)
						q.progTo, q.progLayers = append(q.progTo, m), append(q.progLayers, l)
					}
					if m < nb {
						q.progTo, q.progLayers = append(q.progTo, m), append(q.progLayers, 0)
					}
				}
			} else {
				for range 1 + rng.IntN(3) {
					if m = m + 1 + rng.IntN(nb-m); m >= nb {
						break
					}
					q.progTo, q.progLayers = append(q.progTo, m), append(q.progLayers, 0)
				}
			}
			for range q.progTo {
				q.progAt = append(q.progAt, now.Add(time.Duration(rng.Int64N(int64(span)))))
			}
			slices.SortFunc(q.progAt, func(a, b time.Time) int { return a.Compare(b) })
			if len(q.progAt) > 0 && q.abortPreAt.IsZero() && rng.IntN(10) == 0 {
				q.abortPreAt = q.progAt[0].Add(time.Duration(rng.IntN(3000)) * time.Microsecond)
			}
		}
		if q.reuses != nil {
			// One copy soon after the registration, often another later
			// (while the request waits, drains or has ended).
			q.copies = append(q.copies, q.regAt.Add(time.Duration(rng.IntN(4000))*time.Microsecond))
			if rng.IntN(2) == 0 {
				q.copies = append(q.copies, q.regAt.Add(time.Duration(rng.IntN(40))*time.Millisecond))
			}
		}
		return q
	}
	opts := func(q *creq) []requestOption {
		var o []requestOption
		if q.tid != "" {
			o = append(o, withTransferID(q.tid))
		}
		if q.seqless {
			o = append(o, withoutSeq())
		}
		return o
	}
	for {
		now := time.Now()
		if now.After(deadline) {
			t.Errorf("campaign did not end: %d of %d requests live", len(live), n)
			break
		}
		for len(retries) > 0 && len(live) < 48 {
			q := newReq(now, retries[0])
			if q == nil {
				break
			}
			retries = retries[1:]
			live, all = append(live, q), append(all, q)
		}
		for issued < n && len(live) < 48 {
			q := newReq(now, nil)
			if q == nil {
				break
			}
			live, all = append(live, q), append(all, q)
			issued++
		}
		if !closed && issued >= closeAt {
			closed = true
			require.NoError(t, r.producers[0].Close()) // a rank closes mid-run
		}
		if disconnected == "" && rng.IntN(4000) == 0 {
			disconnected = r.decAgents[rng.IntN(decTP)].Name()
			if rng.IntN(2) == 0 {
				disconnected = r.preAgents[rng.IntN(len(r.preAgents))].Name()
			}
			require.NoError(t, r.fabric.Disconnect(disconnected))
			disconnectUntil = now.Add(5 * time.Millisecond)
		}
		if disconnected != "" && now.After(disconnectUntil) {
			require.NoError(t, r.fabric.Reconnect(disconnected))
			disconnected = ""
		}
		net.deliver(now)
		for _, q := range live {
			if !q.registered && !q.noRegister && !now.Before(q.regAt) {
				q.registered = true
				q.regMark = net.recorded(q.decID)
				for _, c := range r.consumers {
					if err := c.Register(q.decID, coords, q.dblocks, opts(q)...); err != nil {
						t.Errorf("Register %s: %v", q.decID, err)
					}
				}
			}
			if q.noRegister && !q.registered {
				q.registered = true
				for k := range r.consumers {
					q.results[k] = 1 // decode never had it
				}
			}
			for !q.finished && !q.abortedPre && q.progressed < len(q.progAt) && !now.Before(q.progAt[q.progressed]) {
				m, n, final := q.progTo[q.progressed], q.progLayers[q.progressed], q.progFinal
				q.progressed++
				if n == 0 {
					q.progFinal = m
				}
				for j, p := range r.producers {
					if n == 0 {
						fillStage(t, r.preLayout[j], q.pblocks[:m], q.n, m*16) // those blocks' compute ended
					} else {
						// Their first n layers' compute ended; the others still hold no request's bytes.
						fillStageLayers(t, r.preLayout[j], q.pblocks[final:m], final*16, m*16, 0, n, q.n)
					}
					err := p.Progress(q.preID, q.pblocks[:m], len(q.pblocks)*16, append(opts(q), withLayers(n))...)
					switch {
					case err == nil:
						if n > 0 {
							fig.layerReports++
						}
						if q.progHeld == nil {
							q.progHeld = map[int]bool{}
						}
						q.progHeld[j] = true
					case !(j == 0 && closed):
						t.Errorf("Progress %s: %v", q.preID, err)
					}
				}
			}
			if !q.abortPreAt.IsZero() && !q.abortedPre && !q.finished && q.progressed > 0 && !now.Before(q.abortPreAt) {
				// Aborted while prefill computes it: it never finishes.
				q.abortedPre, q.finished = true, true
				for j, p := range r.producers {
					if err := p.Abort(q.preID); err != nil && !(j == 0 && closed) {
						t.Errorf("Abort %s: %v", q.preID, err)
					}
					if j == 0 && closed && !q.progHeld[j] {
						q.frees[j]++ // closed rank: nothing held
					}
				}
			}
			if !q.finished && !now.Before(q.finAt) {
				q.finished = true
				for j := range r.preLayout {
					if o.progressive {
						fillStage(t, r.preLayout[j], q.pblocks, q.n, len(q.pblocks)*16)
					}
				}
				for j, p := range r.producers {
					if _, err := p.RequestFinished(q.preID, q.pblocks, opts(q)...); err != nil {
						if j == 0 && closed {
							if !q.progHeld[j] {
								q.frees[j]++ // closed rank: nothing held (its Close freed what it held)
							}
							continue
						}
						t.Errorf("RequestFinished %s: %v", q.preID, err)
					}
				}
			}
			if !q.abortDecAt.IsZero() && !q.abortedDec && q.registered && !now.Before(q.abortDecAt) {
				q.abortedDec = true
				for _, c := range r.consumers {
					require.NoError(t, c.Abort(q.decID))
				}
			}
			if !q.abortPreAt.IsZero() && !q.abortedPre && q.finished && !now.Before(q.abortPreAt) {
				q.abortedPre = true
				for j, p := range r.producers {
					if err := p.Abort(q.preID); err != nil && !(j == 0 && closed) {
						t.Errorf("Abort %s: %v", q.preID, err)
					}
				}
			}
			if !q.dupAt.IsZero() && !q.duplicated && q.registered && !now.Before(q.dupAt) {
				q.duplicated = true
				duplicate(r, q, coords)
			}
			for len(q.copies) > 0 && q.registered && q.regMark > 0 && !now.Before(q.copies[0]) {
				q.copies = q.copies[1:]
				net.resendCompletion(q.decID, rng.IntN(q.regMark))
				fig.completionCopies++
			}
		}
		for k, c := range r.consumers {
			for _, res := range c.Drain() {
				q := findDec(live, res.RequestID)
				if q == nil {
					fig.decodeResultsTwice++
					continue
				}
				q.results[k]++
				if q.results[k] > 1 {
					fig.decodeResultsTwice++
				}
				if res.Err == nil {
					if !holds(t, r.decLayout[k], q.dblocks, q.n, len(q.dblocks)*16) {
						fig.wrongBytes++
						t.Logf("wrong bytes: rank %d %s", k, describe(q))
					}
				}
				if k == 0 {
					switch {
					case res.Err == nil:
						fig.done++
					case errors.Is(res.Err, connector.ErrAborted):
						fig.aborted++
						fig.failed++
					default:
						fig.failed++
					}
				}
				if res.Err != nil && !q.failed {
					// The engine fails the request as a whole: its other
					// ranks drop it too.
					q.failed = true
					for _, other := range r.consumers {
						require.NoError(t, other.Abort(q.decID))
					}
				}
				poison(t, r.decLayout[k], q.dblocks)
			}
		}
		for j, p := range r.producers {
			for _, id := range p.DrainFreed() {
				q := findPre(live, id)
				if q == nil {
					fig.prefillFreeTwice++
					continue
				}
				q.frees[j]++
				if q.frees[j] > 1 {
					fig.prefillFreeTwice++
				}
			}
		}
		kept := live[:0]
		for _, q := range live {
			if !q.decodeReleased && len(q.results) == decTP && q.registered {
				q.decodeReleased = true
				dfree = append(dfree, q.dblocks...)
				if q.failed && !q.abortedDec && q.retryOf == nil && q.reuses == nil && rng.IntN(2) == 0 && !closed {
					retries = append(retries, q) // the proxy retries it under new suffixes
				}
			}
			if !q.prefillFreed && len(q.frees) == len(r.producers) {
				q.prefillFreed = true
				pfree = append(pfree, q.pblocks...)
			}
			if q.decodeReleased && q.prefillFreed {
				if !q.failed && !q.noRegister && q.retryOf == nil {
					// Ended done on every rank and freed on prefill:
					// a later request may carry its ids.
					reusable = append(reusable, q)
				}
				continue
			}
			kept = append(kept, q)
		}
		live = kept
		if issued >= n && len(live) == 0 && len(retries) == 0 {
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	if disconnected != "" {
		require.NoError(t, r.fabric.Reconnect(disconnected))
	}
	for _, q := range live {
		if len(q.results) < decTP {
			fig.missingResults++
		}
		if len(q.frees) < len(r.producers) {
			fig.missingFrees++
		}
		t.Logf("left: %+v", *q)
	}
	// Every block is back: any WRITE that landed after its release shows.
	time.Sleep(20 * time.Millisecond)
	for k := range decTP {
		for _, b := range dfree {
			if !poisoned(t, r.decLayout[k], []int{b}) {
				fig.writesAfterRelease++
				t.Logf("write after release: decode rank %d block %d, last held by %s; it holds %s", k, b, describe(owner[b]), whose(t, r.decLayout[k], b, all))
			}
		}
	}
	fig.requests = len(all)
	for _, q := range all {
		if q.retryOf != nil {
			fig.retries++
		}
		if q.seqless {
			fig.seqless++
		}
		if q.reuses != nil {
			fig.reused++
		}
	}
	for _, c := range r.consumers {
		fig.cancelTimeouts += int(extra(t, c.Stats(), "cancel_timeouts"))
		fig.partsScattered += int(extra(t, c.Stats(), "staged_parts_scattered"))
		fig.partsDropped += int(extra(t, c.Stats(), "staged_parts_dropped"))
		fig.partsRejected += int(extra(t, c.Stats(), "staged_parts_rejected"))
	}
	for _, p := range r.producers {
		fig.progressWrites += int(extra(t, p.Stats(), "progressive_writes"))
		fig.progressStaged += int(extra(t, p.Stats(), "progressive_staged_writes"))
		fig.progressDeferred += int(extra(t, p.Stats(), "progressive_deferred"))
	}
	if len(staged) > 0 {
		// Every request ended: every slot must come back, each once (a
		// slot released twice is refused and logged, and would show here
		// as one held by two requests at once: a count off).
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if pre, dec := inUse(r); pre+dec == 0 {
				break
			}
		}
		pre, dec := inUse(r)
		fig.slotsLeft = pre + dec
	}
	net.mu.Lock()
	fig.regCopies = net.regCopies
	net.mu.Unlock()
	if fig.writesAfterRelease > 0 {
		t.Logf("seed %d: %d writes after release, %d requests released at CancelTimeout unanswered; the longest pause of this process was %v (the bound's margin: 1.5 s)",
			seed, fig.writesAfterRelease, fig.cancelTimeouts, pauses())
	}
	return fig
}

func findDec(live []*creq, id string) *creq {
	for _, q := range live {
		if q.decID == id && q.registered && !q.noRegister {
			return q
		}
	}
	return nil
}

func findPre(live []*creq, id string) *creq {
	for _, q := range live {
		if q.preID == id && (q.finished || q.progressed > 0) { // a rank closed mid-run frees what reported progress too
			return q
		}
	}
	return nil
}

// holds reports whether decode blocks hold request seed's pattern.
func holds(t testing.TB, l descriptors.Layout, blocks []int, seed, tokens int) bool {
	ok := true
	visit(t, l, blocks, 0, tokens, func(p *byte, region, head, token, b int) {
		if *p != kvByte(seed, region, head, token, b) {
			ok = false
		}
	})
	return ok
}

// duplicate sends q's registration once more from every decode rank, as a
// network that duplicates a message would: the same bytes as the first.
func duplicate(r *rig, q *creq, coords Prefill) {
	for k, c := range r.consumers {
		c.mu.Lock()
		dq := c.tracker.reqs[q.decID]
		var seq uint64
		if dq != nil {
			seq = dq.seq
		}
		c.mu.Unlock()
		if dq == nil {
			continue
		}
		msg, err := pushwire.EncodeRegistration(&pushwire.Registration{
			RequestID: q.decID, DecodeEngineID: r.dec.ID(), DecodeHost: r.dec.Host(), DecodePort: r.dec.Port(),
			DecodeTPSize: r.dec.Geometry().TPSize, LocalBlockIDs: [][]int{q.dblocks}, RemoteEngineID: coords.EngineID,
			RemoteHost: coords.Host, RemotePort: coords.Port, RemoteTPSize: coords.TPSize, RemotePPSize: coords.PPSize,
			TransferID: q.tid, DecodeIncarnation: c.incarnation, Seq: seq,
		})
		if err != nil {
			continue
		}
		for _, a := range r.preAgents {
			_ = r.decAgents[k].GenNotif(a.Name(), msg, nil)
		}
	}
}

// describe is a request's story, for a failure message.
func describe(q *creq) string {
	if q == nil {
		return "no request"
	}
	return fmt.Sprintf("request %d (dec %s pre %s tid %q retry %v failed %v abortedDec %v abortedPre %v dup %v noReg %v seqless %v reuses %v results %v frees %v)",
		q.n, q.decID, q.preID, q.tid, q.retryOf != nil, q.failed, q.abortedDec, q.abortedPre, q.duplicated, q.noRegister, q.seqless, q.reuses != nil, q.results, q.frees)
}

// whose names the request and block position whose KV block b holds.
func whose(t testing.TB, l descriptors.Layout, b int, all []*creq) string {
	for _, q := range all {
		for i := range q.pblocks {
			ok := true
			visit(t, l, []int{b}, 0, 16, func(p *byte, region, head, token, bb int) {
				if *p != kvByte(q.n, region, head, i*16+token, bb) {
					ok = false
				}
			})
			if ok {
				return fmt.Sprintf("block %d of %s", i, describe(q))
			}
		}
	}
	return "bytes of no request"
}

// watchPauses measures, until the test ends, the longest gap between
// ticks of a 1 ms ticker: how long the process (or its timers) stalled.
// The returned func reports the longest so far.
func watchPauses(t *testing.T) func() time.Duration {
	var longest atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				if gap := int64(now.Sub(last)); gap > longest.Load() {
					longest.Store(gap)
				}
				last = now
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() time.Duration { return time.Duration(longest.Load()) }
}

// requireHeld fails t unless the campaign kept the promise: no done result
// with a wrong byte, no write into blocks after their release, every
// request ended and every hold freed exactly once.
func (f campaignFigures) requireHeld(t *testing.T) {
	t.Helper()
	require.Zero(t, f.wrongBytes, "done results with a wrong byte")
	require.Zero(t, f.writesAfterRelease, "writes into blocks after their release")
	require.Zero(t, f.decodeResultsTwice+f.prefillFreeTwice, "ended or freed twice")
	require.Zero(t, f.missingResults+f.missingFrees, "never ended or never freed")
}
