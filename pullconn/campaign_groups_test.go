package pullconn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// TestFaultCampaignGroups is the fault campaign over grouped layouts: a
// two-group sliding-window model and a hybrid attention + Mamba model, at
// TP 2->2, 2->1 and 1->2, through the same faults as TestFaultCampaign
// (failed posts and transfers, dropped and delayed notifications, a
// disconnect, lease expiries, aborts on both sides, inline and background
// readers, the recompute policy). Each request lists its groups as vLLM
// does (every block of the full group less a random decode prefix hit,
// only the window's blocks of the sliding-window group, one state slot of
// the SSM group); every byte of every done result is checked where the
// model places it, and blocks the engine holds free keep their poison.
// GONIXL_CAMPAIGN=long runs 5 seeds x 2000 requests per shape and pairing.
func TestFaultCampaignGroups(t *testing.T) {
	seeds, requests := 1, 150
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, requests = 5, 2000
	}
	var total campaignFigures
	for _, shape := range grouptest.Shapes {
		for _, pair := range []struct{ p, d int }{{2, 2}, {2, 1}, {1, 2}} {
			for seed := 1; seed <= seeds; seed++ {
				name := fmt.Sprintf("%s/tp%d-to-tp%d/seed%d", shape, pair.p, pair.d, seed)
				t.Run(name, func(t *testing.T) {
					f := runGroupCampaign(t, uint64(seed), shape, pair.p, pair.d, requests)
					t.Logf("%s: %v", name, f)
					total.add(f)
				})
			}
		}
	}
	t.Logf("pull grouped campaign total: %v", total)
	require.Zero(t, total.wrongBytes, "done results with wrong bytes")
	require.Zero(t, total.writesAfterRelease, "writes into decode blocks after they were handed back")
}

// groupCampaignReq is one request's life in the grouped campaign.
type groupCampaignReq struct {
	seed, tokens int
	id, did      string
	src, dst     [][]int
	params       Params
	loadAt       time.Time
	abortAt      time.Time
	loaded       bool
	ended        []int // results per decode rank
	freed        []int // DrainFreed per prefill rank
	prefillOut   bool
	decodeOut    bool
}

func runGroupCampaign(t *testing.T, seed uint64, shape string, ptp, dtp, n int) campaignFigures {
	const lease = 200 * time.Millisecond
	rng := rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d))
	c, err := newGroupClusterOpts(t, shape, side{ptp, 16}, side{dtp, 16}, groupOpts{
		fabric: []loopback.FabricOption{loopback.WithSeed(seed), loopback.WithModel(loopback.FixedLatency(time.Millisecond))},
		prefillCfg: func(rc *Config) {
			rc.ParamsAfterAllRanks = true
			rc.Lease = lease
			rc.HeartbeatExtension = lease * 2 / 3
		},
		decodeCfg: func(rc *Config) {
			rc.Lease = lease
			rc.HeartbeatInterval = lease / 6
			rc.TransferTimeout = 100 * time.Millisecond
			rc.ExpiryMargin = 20 * time.Millisecond
			rc.Inline = seed%2 == 0
			if seed%3 == 0 {
				rc.FailurePolicy = connector.PolicyRecompute
			}
		},
	})
	require.NoError(t, err)
	for _, flt := range []loopback.Fault{
		{Kind: loopback.FailPost, Probability: 0.03},
		{Kind: loopback.FailInFlight, Probability: 0.03},
		{Kind: loopback.DropNotif, Probability: 0.03},
		{Kind: loopback.DelayNotif, Probability: 0.05, Delay: 40 * time.Millisecond},
	} {
		_, err := c.fab.AddFault(flt)
		require.NoError(t, err)
	}
	srcs, dsts := groupRanks(c.pbufs, c.playouts), groupRanks(c.dbufs, c.dlayouts)
	for _, r := range append(append([]grouptest.Rank{}, srcs...), dsts...) {
		for i := range r.Mem {
			r.Mem[i] = grouptest.Poison
		}
	}
	pfree, dfree := grouptest.NewAlloc(&c.playouts[0]), grouptest.NewAlloc(&c.dlayouts[0])
	var f campaignFigures
	f.requests = n
	reqs, byDecode := map[string]*groupCampaignReq{}, map[string]*groupCampaignReq{}
	next, live := 0, 0
	deadline := time.Now().Add(2 * time.Minute)
	for (next < n || live > 0) && time.Now().Before(deadline) {
		now := time.Now()
		if next < n && live < 6 {
			tokens := 1 + rng.IntN(64)
			hit := 0
			if tokens > 16 && rng.Float64() < 0.3 {
				hit = 1 // a decode prefix hit of the full group's first block
			}
			pb, ok1 := pfree.Take(grouptest.Counts(&c.playouts[0], tokens, 16, 0))
			db, ok2 := dfree.Take(grouptest.Counts(&c.dlayouts[0], tokens, 16, hit))
			if ok1 && ok2 {
				r := &groupCampaignReq{seed: int(seed)*1_000_000 + next, tokens: tokens, id: fmt.Sprintf("req-%d", next), did: fmt.Sprintf("dreq-%d", next),
					src: pb, dst: db, ended: make([]int, dtp), freed: make([]int, ptp)}
				for _, d := range dsts {
					if bad, first := grouptest.Unpoisoned(d, db); bad > 0 {
						f.writesAfterRelease += bad
						t.Errorf("%s before %s: %d blocks written after their release, first %s", shape, r.did, bad, first)
					}
				}
				for _, s := range srcs {
					grouptest.Fill(r.seed, s, pb, tokens)
				}
				for i, p := range c.prods {
					par, err := p.RequestFinishedGroups(r.id, tokens, pb)
					require.NoError(t, err)
					if i == 0 {
						r.params = par
					}
				}
				switch x := rng.Float64(); {
				case x < 0.7:
					r.loadAt = now
				case x < 0.9:
					r.loadAt = now.Add(time.Duration(rng.Int64N(int64(lease / 2))))
				default:
					r.loadAt = now.Add(lease + time.Duration(rng.Int64N(int64(lease))))
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
				next++
				live++
				if next == n/2 {
					require.NoError(t, c.fab.Disconnect("prefill-0"))
					time.AfterFunc(20*time.Millisecond, func() { _ = c.fab.Reconnect("prefill-0") })
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
		for _, r := range byDecode {
			if !r.loaded && !now.Before(r.loadAt) {
				r.loaded = true
				for _, cn := range c.cons {
					require.NoError(t, cn.LoadGroups(r.did, r.params, r.dst))
				}
			}
			if r.loaded && !r.abortAt.IsZero() && !now.Before(r.abortAt) {
				r.abortAt = time.Time{}
				for _, cn := range c.cons {
					require.NoError(t, cn.Abort(r.did))
				}
			}
		}
		for rank, cn := range c.cons {
			for _, res := range cn.Drain() {
				r := byDecode[res.RequestID]
				require.NotNil(t, r, "result for unknown request %q", res.RequestID)
				r.ended[rank]++
				require.Equal(t, 1, r.ended[rank], "request %s ended twice on decode rank %d", r.did, rank)
				d := dsts[rank]
				if res.Err == nil {
					from := grouptest.Start(d.L, r.src, r.dst, r.tokens, 16, 16)
					if wrong, _ := grouptest.Wrong(r.seed, d, r.dst, r.tokens, from); wrong > 0 {
						f.wrongBytes += wrong
						t.Errorf("%s: request %s done on decode rank %d with %d wrong bytes", shape, r.did, rank, wrong)
					}
				}
				switch {
				case rank > 0:
				case res.Err == nil:
					f.done++
				default:
					f.failed++
					if errors.Is(res.Err, ErrExpired) {
						f.expired++
					} else if errors.Is(res.Err, connector.ErrAborted) {
						f.aborted++
					}
				}
				// The engine takes the blocks back: poison them, so a
				// late write shows.
				grouptest.PoisonBlocks(d, r.dst)
			}
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
				for _, s := range srcs {
					grouptest.PoisonBlocks(s, r.src)
				}
				pfree.Give(r.src)
			}
			if !r.decodeOut && slices.Equal(r.ended, slices.Repeat([]int{1}, dtp)) {
				r.decodeOut = true
				dfree.Give(r.dst)
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
	for r, cn := range c.cons {
		require.Empty(t, cn.Drain(), "decode rank %d: a result after every request ended", r)
	}
	for _, d := range dsts {
		if bad, first := grouptest.Unpoisoned(d, dfree.Free()); bad > 0 {
			f.writesAfterRelease += bad
			t.Errorf("%s at the end: %d free blocks written after their release, first %s", shape, bad, first)
		}
	}
	require.Positive(t, f.done, "no request done")
	return f
}
