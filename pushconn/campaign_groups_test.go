package pushconn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/internal/lease"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// TestFaultCampaignGroups is the push fault campaign over grouped layouts:
// a two-group sliding-window model and a hybrid attention + Mamba model,
// at TP 2->2, 2->1 and 1->2, through failed posts and transfers, dropped
// and delayed notifications, a disconnect, aborts on both sides, and
// registrations before and after the finish. Each request lists its
// groups as vLLM does (every block of the full group less a random decode
// prefix hit, only the window's blocks of the sliding-window group, one
// state slot of the SSM group); every byte of every done result is checked
// where the model places it, and blocks the engine holds free keep their
// poison. GONIXL_CAMPAIGN=long runs 5 seeds x 2000 requests per shape and
// pairing.
func TestFaultCampaignGroups(t *testing.T) {
	seeds, n := 1, 150
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, n = 5, 2000
	}
	var total campaignFigures
	for _, shape := range grouptest.Shapes {
		for _, tp := range [][2]int{{2, 2}, {2, 1}, {1, 2}} {
			for s := range seeds {
				seed := uint64(1000*tp[0] + 100*tp[1] + s + 1)
				t.Run(fmt.Sprintf("%s/tp%dto%d/seed%d", shape, tp[0], tp[1], seed), func(t *testing.T) {
					f := runGroupCampaign(t, seed, shape, n, tp[0], tp[1])
					t.Logf("%s TP %d -> %d seed %d: %d requests: %d done, %d failed (%d aborted), %d wrong bytes, %d writes after release",
						shape, tp[0], tp[1], seed, f.requests, f.done, f.failed, f.aborted, f.wrongBytes, f.writesAfterRelease)
					total.add(f)
				})
			}
		}
	}
	t.Logf("push grouped campaign total: %d requests: %d done, %d failed (%d aborted), %d wrong bytes in done results, %d writes after release",
		total.requests, total.done, total.failed, total.aborted, total.wrongBytes, total.writesAfterRelease)
	require.Zero(t, total.wrongBytes, "done results with a wrong byte")
	require.Zero(t, total.writesAfterRelease, "writes into blocks after their release")
}

// TestFaultCampaignGroupsStaged is the grouped campaign with staging on
// every rank (3 slots each, so some requests find none and go direct,
// chunked WRITEs, one chunk per region of the group image), a copier that
// fails one gather or scatter in 211, over both shapes and hybrid-1kv,
// and the same faults and guarantees:
// every byte of every done result, no write into a released block, and
// every slot back at the end. GONIXL_CAMPAIGN=long runs 5 seeds x 2000
// requests per shape and pairing.
func TestFaultCampaignGroupsStaged(t *testing.T) {
	seeds, n := 1, 150
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, n = 5, 2000
	}
	var total campaignFigures
	var copies int
	// hybrid-1kv replicates its one KV head at TP 2 while the state is
	// split: a prefill rank may write a decode rank's state but not its
	// attention, so the images differ by rank.
	for _, shape := range append(append([]string{}, grouptest.Shapes...), "hybrid-1kv") {
		for _, tp := range [][2]int{{2, 2}, {2, 1}, {1, 2}} {
			for s := range seeds {
				seed := uint64(7000 + 1000*tp[0] + 100*tp[1] + s + 1)
				t.Run(fmt.Sprintf("%s/tp%dto%d/seed%d", shape, tp[0], tp[1], seed), func(t *testing.T) {
					m := newStagingMem(t, connector.StagingOn, 3, 64<<10)
					cc := &stagingtest.Copier{FailEvery: 211}
					m.copier = func(string) connector.Copier { return cc }
					f, staged := runGroupCampaignWith(t, seed, shape, n, tp[0], tp[1], m)
					t.Logf("%s TP %d -> %d seed %d: %d requests: %d done, %d failed (%d aborted), %d wrong bytes, %d writes after release; %d staged WRITEs, %d gathers and scatters",
						shape, tp[0], tp[1], seed, f.requests, f.done, f.failed, f.aborted, f.wrongBytes, f.writesAfterRelease, staged, cc.Count())
					require.Positive(t, staged, "the campaign staged nothing")
					copies += cc.Count()
					total.add(f)
				})
			}
		}
	}
	t.Logf("push grouped staged campaign total: %d requests: %d done, %d failed (%d aborted), %d wrong bytes in done results, %d writes after release; %d gathers and scatters",
		total.requests, total.done, total.failed, total.aborted, total.wrongBytes, total.writesAfterRelease, copies)
	require.Zero(t, total.wrongBytes, "done results with a wrong byte")
	require.Zero(t, total.writesAfterRelease, "writes into blocks after their release")
}

// groupCReq is one request's life in the grouped push campaign.
type groupCReq struct {
	seed, tokens          int
	id                    string
	src, dst              [][]int
	registered, finished  bool
	registerAt, finishAt  time.Time
	abortAt               time.Time
	ended, freed          []int
	prefillOut, decodeOut bool
}

func runGroupCampaign(t *testing.T, seed uint64, shape string, n, preTP, decTP int) campaignFigures {
	f, _ := runGroupCampaignWith(t, seed, shape, n, preTP, decTP, nil)
	return f
}

// runGroupCampaignWith is runGroupCampaign with staging memory m on every
// rank (nil: none); it also returns the WRITEs prefill staged, and checks
// with staging that every slot came back.
func runGroupCampaignWith(t *testing.T, seed uint64, shape string, n, preTP, decTP int, m *stagingMem) (campaignFigures, uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	stage := func(string) func(*Config) { return func(*Config) {} }
	if m != nil {
		stage = m.rank
	}
	g, err := newGroupRigOpts(t, shape, preTP, 16, decTP, 16, groupRigOpts{
		fabric: []loopback.FabricOption{loopback.WithSeed(seed), loopback.WithModel(loopback.FixedLatency(200 * time.Microsecond))},
		clock:  lease.SystemClock{},
		rank: func(c *Config) {
			c.StatsInterval = -1
			c.IdleInterval = 2 * time.Millisecond
			c.Lease = 300 * time.Millisecond
		},
		preRank: func(c *Config) {
			stage("prefill")(c)
			c.WriteTimeout = 150 * time.Millisecond
			c.RegistrationTimeout = 600 * time.Millisecond
		},
		decRank: func(c *Config) {
			stage("decode")(c)
			c.RegistrationTimeout = 800 * time.Millisecond
			c.CancelTimeout = 1800 * time.Millisecond // 2 x WriteTimeout + a 1.5 s margin, as campaign_test.go says why
		},
	})
	require.NoError(t, err)
	for _, f := range []loopback.Fault{
		{Kind: loopback.FailPost, Probability: 0.02},
		{Kind: loopback.FailInFlight, Probability: 0.02},
		{Kind: loopback.DropNotif, Probability: 0.005},
		{Kind: loopback.DelayNotif, Probability: 0.03, Delay: 20 * time.Millisecond},
	} {
		_, err := g.fabric.AddFault(f)
		require.NoError(t, err)
	}
	for _, r := range append(append([]grouptest.Rank{}, g.pre...), g.dec...) {
		for i := range r.Mem {
			r.Mem[i] = grouptest.Poison
		}
	}
	pfree, dfree := grouptest.NewAlloc(g.pre[0].L), grouptest.NewAlloc(g.dec[0].L)
	coords := Coordinates(g.rig.pre)
	var fig campaignFigures
	fig.requests = n
	reqs := map[string]*groupCReq{}
	next, live := 0, 0
	deadline := time.Now().Add(2 * time.Minute)
	for (next < n || live > 0) && time.Now().Before(deadline) {
		now := time.Now()
		if next < n && live < 6 {
			tokens := 1 + rng.IntN(64)
			hit := 0
			if tokens > 16 && rng.Float64() < 0.3 {
				hit = 1
			}
			pb, ok1 := pfree.Take(grouptest.Counts(g.pre[0].L, tokens, 16, 0))
			db, ok2 := dfree.Take(grouptest.Counts(g.dec[0].L, tokens, 16, hit))
			if ok1 && ok2 {
				r := &groupCReq{seed: int(seed)*1_000_000 + next, tokens: tokens, id: fmt.Sprintf("req-%d", next), src: pb, dst: db,
					ended: make([]int, decTP), freed: make([]int, preTP), registerAt: now, finishAt: now}
				if later := time.Duration(rng.Int64N(int64(20 * time.Millisecond))); rng.IntN(2) == 0 {
					r.registerAt = now.Add(later)
				} else {
					r.finishAt = now.Add(later)
				}
				if rng.Float64() < 0.05 {
					r.abortAt = now.Add(time.Duration(rng.Int64N(int64(30 * time.Millisecond))))
				}
				for _, d := range g.dec {
					if bad, first := grouptest.Unpoisoned(d, db); bad > 0 {
						fig.writesAfterRelease += bad
						t.Errorf("%s before %s: %d blocks written after their release, first %s", shape, r.id, bad, first)
					}
				}
				for _, s := range g.pre {
					grouptest.Fill(r.seed, s, pb, tokens)
				}
				reqs[r.id] = r
				next++
				live++
				if next == n/2 {
					require.NoError(t, g.fabric.Disconnect("gprefill-0"))
					time.AfterFunc(20*time.Millisecond, func() { _ = g.fabric.Reconnect("gprefill-0") })
				}
			} else {
				if ok1 {
					pfree.Give(pb)
				}
				if ok2 {
					dfree.Give(db)
				}
			}
		}
		for _, r := range reqs {
			if !r.registered && !now.Before(r.registerAt) {
				r.registered = true
				for _, c := range g.consumers {
					require.NoError(t, c.RegisterGroups(r.id, coords, r.dst))
				}
			}
			if !r.finished && !now.Before(r.finishAt) {
				r.finished = true
				for _, p := range g.producers {
					_, err := p.RequestFinishedGroups(r.id, r.tokens, r.src)
					require.NoError(t, err)
				}
				if rng.Float64() < 0.03 {
					for _, p := range g.producers {
						require.NoError(t, p.Abort(r.id))
					}
				}
			}
			if r.registered && !r.abortAt.IsZero() && !now.Before(r.abortAt) {
				r.abortAt = time.Time{}
				for _, c := range g.consumers {
					require.NoError(t, c.Abort(r.id))
				}
			}
		}
		for rank, c := range g.consumers {
			for _, res := range c.Drain() {
				r := reqs[res.RequestID]
				require.NotNil(t, r, "result for unknown request %q", res.RequestID)
				r.ended[rank]++
				require.Equal(t, 1, r.ended[rank], "request %s ended twice on decode rank %d", r.id, rank)
				d := g.dec[rank]
				if res.Err == nil {
					from := grouptest.Start(d.L, r.src, r.dst, r.tokens, 16, 16)
					if wrong, _ := grouptest.Wrong(r.seed, d, r.dst, r.tokens, from); wrong > 0 {
						fig.wrongBytes += wrong
						t.Errorf("%s: request %s done on decode rank %d with %d wrong bytes", shape, r.id, rank, wrong)
					}
				}
				switch {
				case rank > 0:
				case res.Err == nil:
					fig.done++
				default:
					fig.failed++
					if errors.Is(res.Err, connector.ErrAborted) {
						fig.aborted++
					}
				}
				grouptest.PoisonBlocks(d, r.dst)
			}
		}
		for rank, p := range g.producers {
			for _, id := range p.DrainFreed() {
				r := reqs[id]
				require.NotNil(t, r, "freed unknown request %q", id)
				r.freed[rank]++
				require.Equal(t, 1, r.freed[rank], "request %s freed twice on prefill rank %d", id, rank)
			}
		}
		for id, r := range reqs {
			if !r.prefillOut && allOnes(r.freed) {
				r.prefillOut = true
				for _, s := range g.pre {
					grouptest.PoisonBlocks(s, r.src)
				}
				pfree.Give(r.src)
			}
			if !r.decodeOut && allOnes(r.ended) {
				r.decodeOut = true
				dfree.Give(r.dst)
			}
			if r.prefillOut && r.decodeOut {
				delete(reqs, id)
				live--
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	require.Zero(t, live, "%d requests did not end in time", live)
	for _, d := range g.dec {
		if bad, first := grouptest.Unpoisoned(d, dfree.Free()); bad > 0 {
			fig.writesAfterRelease += bad
			t.Errorf("%s at the end: %d free blocks written after their release, first %s", shape, bad, first)
		}
	}
	require.Positive(t, fig.done, "no request done")
	var staged uint64
	if m != nil {
		eventually(t, "staging slots back", func() bool { pre, dec := inUse(g.rig); return pre+dec == 0 })
		for _, p := range g.producers {
			staged += extra(t, p.Stats(), "staged_transfers")
		}
	}
	return fig, staged
}

func allOnes(counts []int) bool {
	for _, n := range counts {
		if n != 1 {
			return false
		}
	}
	return true
}
