package pullconn

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
)

// gatedCluster is a staged cluster whose prefill ranks gather through
// gates (one per rank, nil: host copy), with every staging slot poisoned
// so that a READ of a chunk not yet gathered would carry wrong bytes.
func gatedCluster(t *testing.T, o clusterOpts, slots int, gates ...*stagingtest.Gate) (*cluster, *stagingMem) {
	t.Helper()
	m := newStagingMem(t, connector.StagingOn, slots, 64<<10)
	then := o.prefillCfg
	o.prefillCfg = func(rc *Config) {
		if r := rc.Layout.TPRank; r < len(gates) && gates[r] != nil {
			rc.Staging.Copier = gates[r]
		}
		if then != nil {
			then(rc)
		}
	}
	c := stagedCluster(t, o, m)
	for _, b := range m.bufs {
		fillAll(b, poison)
	}
	return c, m
}

// drainFor drains every decode rank until cond holds (up to 10 s),
// collecting results: with Inline readers Drain is what posts the READs.
func (c *cluster) drainFor(got map[string]connector.Result, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		for _, cn := range c.cons {
			for _, r := range cn.Drain() {
				got[r.RequestID] = r
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatal("condition not met within 10 s")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// TestStagedPullAwaitsChunks: RequestFinished returns the Params while the
// gather is held before its first chunk, marked RemoteStagingAwait; decode
// posts no READ of the slot until prefill says a chunk is gathered, then
// exactly one READ per gathered chunk, and the bytes arrive whole (the
// slot was poisoned: an early READ would show), with the background and
// the inline reader.
func TestStagedPullAwaitsChunks(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			g := &stagingtest.Gate{}
			c, _ := gatedCluster(t, clusterOpts{decodeCfg: func(rc *Config) { rc.Inline = inline }}, 2, g)
			blocks := []int{9, 3, 30, 12}
			c.fill(4, blocks, 64)
			start := time.Now()
			p := c.finish("r", blocks)
			require.Less(t, time.Since(start), time.Second, "RequestFinished does not wait for the gather")
			require.NotNil(t, p.RemoteStagingSlot)
			require.True(t, p.RemoteStagingAwait)
			require.True(t, g.WaitStarted(1, 5*time.Second), "the gather started")
			local := []int{5, 40, 7, 22}
			c.load("d", p, local)
			got := map[string]connector.Result{}
			asked := func() bool { return extraCount(t, c.cons[0].Stats(), "readiness_queries") >= 1 }
			// The first answer comes at readyWait (nothing changed): then
			// decode asks again, and still posts nothing.
			c.drainFor(got, asked)
			require.Zero(t, c.fab.Counters().Posted, "no READ before a chunk is gathered")
			n := staging.ChunkCount(2*testLayers, 0)
			for k := 1; k <= n; k++ {
				g.Allow(1)
				c.drainFor(got, func() bool { return c.fab.Counters().Posted >= uint64(k) })
				require.Equal(t, uint64(k), c.fab.Counters().Posted, "one READ per gathered chunk")
				if k < n {
					// Once the last chunk's READ is posted the load may end
					// at any moment (a loopback READ completes at once);
					// before it, it must not.
					require.Empty(t, got, "a result before chunk %d of %d was READ", k+1, n)
				}
			}
			c.drainFor(got, func() bool { return len(got) == 1 })
			require.NoError(t, got["d"].Err)
			c.verify(4, local, 0, 64)
			require.Equal(t, map[string]int{"r": 1}, c.freed(1)[0])
			require.Equal(t, uint64(1), extraCount(t, c.prods[0].Stats(), "staged_transfers"))
			pre, dec := slotsInUse(c)
			require.Zero(t, pre)
			require.Zero(t, dec)
		})
	}
}

// TestStagedPullAwaitSeveralRanks: with two prefill ranks (the first
// choosing the slot for both, ParamsAfterAllRanks), readiness is per rank:
// decode reads rank 0's slot as soon as rank 0 has gathered, while rank 1
// is held, and rank 1's once it has; a failure of rank 1's gather alone
// fails the load with ErrStaging naming rank 1.
func TestStagedPullAwaitSeveralRanks(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			g0, g1 := &stagingtest.Gate{}, &stagingtest.Gate{}
			g0.Open()
			if fail {
				g1.Fail(2)
			}
			c, _ := gatedCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{1, 16},
				prefillCfg: func(rc *Config) { rc.ParamsAfterAllRanks = true }}, 2, g0, g1)
			blocks := []int{9, 3, 30, 12}
			c.fill(6, blocks, 64)
			p := c.finish("r", blocks)
			require.True(t, p.RemoteStagingAwait)
			local := []int{5, 40, 7, 22}
			c.load("d", p, local)
			got := map[string]connector.Result{}
			// Like blocks do not map one to one across TP 2 -> 1: each
			// rank's slot is one READ, posted once that rank is done.
			c.drainFor(got, func() bool { return c.fab.Counters().Posted == 1 })
			time.Sleep(20 * time.Millisecond)
			c.drainFor(got, func() bool { return true })
			require.Equal(t, uint64(1), c.fab.Counters().Posted, "rank 1's slot is not read before rank 1 gathered")
			require.Empty(t, got)
			g1.Open()
			c.drainFor(got, func() bool { return len(got) == 1 })
			if fail {
				require.ErrorIs(t, got["d"].Err, connector.ErrStaging)
				require.ErrorContains(t, got["d"].Err, "prefill rank 1's gather into its staging slot failed")
				require.Equal(t, uint64(1), c.fab.Counters().Posted)
				require.Equal(t, 1, c.prods[1].Held(), "rank 1 keeps the blocks until the hold ends")
				return
			}
			require.NoError(t, got["d"].Err)
			c.verify(6, local, 0, 64)
			require.Equal(t, uint64(2), extraCount(t, c.cons[0].Stats(), "staged_transfers"))
			for i, f := range c.freed(1) {
				require.Equal(t, map[string]int{"r": 1}, f, "prefill rank %d", i)
			}
		})
	}
}

// TestStagedPullHoldEndsMidGather: a hold that ends while its gather is
// copying (lease, DropHolds, Close, a decode that never asks) keeps its
// slot, and its id stays out of DrainFreed, until the chunk being copied
// is done; the gather copies no chunk after it; then the id comes out
// once and the slot is free. A decode reading it meanwhile fails, never
// done.
func TestStagedPullHoldEndsMidGather(t *testing.T) {
	const lease = time.Minute
	for _, how := range []string{"lease", "drop", "close", "close-reading", "never-asked"} {
		t.Run(how, func(t *testing.T) {
			g := &stagingtest.Gate{}
			fc := connector.NewManualClock(time.Unix(1_800_000_000, 0))
			c, _ := gatedCluster(t, clusterOpts{prefillCfg: func(rc *Config) { rc.Clock, rc.Lease = fc, lease }}, 1, g)
			blocks := []int{9, 3}
			c.fill(2, blocks, 32)
			p := c.finish("x", blocks)
			require.True(t, p.RemoteStagingAwait)
			got := map[string]connector.Result{}
			if how == "never-asked" {
				// Gathered whole; nobody reads; the lease ends.
				g.Open()
				require.True(t, g.WaitEnded(staging.ChunkCount(2*testLayers, 0), 5*time.Second))
				fc.Advance(lease + time.Second)
				require.Equal(t, map[string]int{"x": 1}, c.freed(1)[0])
				pre, _ := slotsInUse(c)
				require.Zero(t, pre)
				return
			}
			g.Allow(1)
			require.True(t, g.WaitStarted(2, 5*time.Second), "the second chunk is being copied")
			if how == "close-reading" {
				c.load("dx", p, []int{20, 21})
				c.drainFor(got, func() bool { return c.fab.Counters().Posted >= 1 || len(got) > 0 })
				require.Empty(t, got)
				require.Equal(t, uint64(1), c.fab.Counters().Posted, "the gathered chunk is read")
			}
			closed := make(chan error, 1)
			switch how {
			case "lease":
				fc.Advance(lease + time.Second)
				eventually(t, func() bool { return c.prods[0].Held() == 0 })
			case "drop":
				dropped, kept, err := c.prods[0].DropHolds("going away", 0)
				require.NoError(t, err)
				require.Equal(t, 1, dropped)
				require.Zero(t, kept)
			case "close", "close-reading":
				go func() { closed <- c.prods[0].Close() }()
				select {
				case err := <-closed:
					t.Fatalf("Close returned (%v) while a gather was copying", err)
				case <-time.After(30 * time.Millisecond):
				}
			}
			time.Sleep(20 * time.Millisecond)
			require.Empty(t, c.prods[0].DrainFreed(), "no block is free while the gather reads them")
			pre, _ := slotsInUse(c)
			require.Equal(t, 1, pre, "the slot is the gather's while it copies")
			g.Open()
			if how == "close" || how == "close-reading" {
				require.NoError(t, <-closed)
			}
			require.Equal(t, map[string]int{"x": 1}, c.freed(1)[0])
			pre, _ = slotsInUse(c)
			require.Zero(t, pre)
			started, _ := g.Counts()
			require.Equal(t, 2, started, "no chunk copied after the hold ended")
			if how == "close-reading" {
				// Decode's pin kept the hold past any lease; prefill's
				// Close ends it: the load fails, never done.
				c.drainFor(got, func() bool { return len(got) == 1 })
				require.Error(t, got["dx"].Err)
				require.Equal(t, uint64(1), c.fab.Counters().Posted, "only the gathered chunk was read")
			}
		})
	}
}

// TestStagedPullAwaitNeverGathered: a gather that does not move within
// decode's TransferTimeout fails the load with ErrTimeout, no READ of the
// slot posted; an answer arriving after the load ended changes nothing;
// the hold ends as usual.
func TestStagedPullAwaitNeverGathered(t *testing.T) {
	g := &stagingtest.Gate{}
	c, _ := gatedCluster(t, clusterOpts{decodeCfg: func(rc *Config) { rc.TransferTimeout = 50 * time.Millisecond }}, 1, g)
	blocks := []int{9, 3}
	c.fill(2, blocks, 32)
	p := c.finish("x", blocks)
	c.load("dx", p, []int{20, 21})
	r := c.result("dx")[0]
	require.ErrorIs(t, r.Err, ErrTimeout)
	require.Zero(t, c.fab.Counters().Posted)
	g.Open() // the answer of the query still waiting on prefill comes late
	require.True(t, g.WaitEnded(staging.ChunkCount(2*testLayers, 0), 5*time.Second))
	time.Sleep(20 * time.Millisecond)
	require.Empty(t, c.cons[0].Drain(), "no second result")
	require.Zero(t, c.fab.Counters().Posted, "no READ after the load ended")
	require.NoError(t, c.prods[0].Close())
	require.Equal(t, map[string]int{"x": 1}, c.freed(1)[0])
}

// TestStagedPullReadinessFaults: lost readiness answers (decode asks
// again) and late ones (decode waits) delay the READs but change no byte.
func TestStagedPullReadinessFaults(t *testing.T) {
	g := &stagingtest.Gate{}
	c, _ := gatedCluster(t, clusterOpts{}, 1, g)
	var n atomic.Int32
	s := &pullOf(t, c.pe).slots
	s.mu.Lock()
	s.fault = func() (bool, time.Duration) {
		switch k := n.Add(1); {
		case k <= 3:
			return true, 0
		case k <= 5:
			return false, 30 * time.Millisecond
		}
		return false, 0
	}
	s.mu.Unlock()
	blocks := []int{9, 3, 14}
	c.fill(3, blocks, 48)
	p := c.finish("x", blocks)
	c.load("dx", p, []int{20, 21, 2})
	got := map[string]connector.Result{}
	c.drainFor(got, func() bool { return n.Load() >= 5 })
	g.Open()
	c.drainFor(got, func() bool { return len(got) == 1 })
	require.NoError(t, got["dx"].Err)
	c.verify(3, []int{20, 21, 2}, 0, 48)
	require.Equal(t, uint64(3), extraCount(t, c.cons[0].Stats(), "failed_readiness_queries"))
}

// TestStagedPullAwaitIgnored: Params whose RemoteStagingAwait was dropped
// on the way (a decode that does not know the key reads the slot at once)
// never give a done result: they name another hold, which prefill does
// not pin.
func TestStagedPullAwaitIgnored(t *testing.T) {
	g := &stagingtest.Gate{}
	c, _ := gatedCluster(t, clusterOpts{}, 1, g)
	blocks := []int{9, 3}
	c.fill(2, blocks, 32)
	p := c.finish("x", blocks)
	p.RemoteStagingAwait = false
	c.load("dx", p, []int{20, 21})
	r := c.result("dx")[0]
	require.ErrorIs(t, r.Err, ErrNotHeld)
	g.Open()
}

// TestParamsAwaitNeedsSlot: RemoteStagingAwait without a slot is refused,
// naming the field.
func TestParamsAwaitNeedsSlot(t *testing.T) {
	p := Params{TransferParams: connector.TransferParams{DoRemotePrefill: true, RemoteEngineID: "e", RemoteRequestID: "r", RemoteHost: "h", RemotePort: 1, TPSize: 1},
		RemoteStagingAwait: true}
	err := p.Validate()
	require.ErrorIs(t, err, connector.ErrInvalid)
	require.ErrorContains(t, err, "Params.RemoteStagingAwait is set without Params.RemoteStagingSlot")
	slot := 0
	p.RemoteStagingSlot = &slot
	require.NoError(t, p.Validate())
	require.False(t, errors.Is(p.Validate(), connector.ErrInvalid))
}

// TestStagedPullPostsDuringScatter: a chunk gathered while decode scatters
// the chunk before (its copier calling back between polls, as the GPU
// copier does) is READ at once, during that scatter, not after it.
func TestStagedPullPostsDuringScatter(t *testing.T) {
	pg, dg := &stagingtest.Gate{}, &stagingtest.Gate{}
	c, _ := gatedCluster(t, clusterOpts{decodeCfg: func(rc *Config) { rc.Staging.Copier = dg }}, 2, pg)
	blocks := []int{9, 3, 30, 12}
	c.fill(7, blocks, 64)
	p := c.finish("r", blocks)
	local := []int{5, 40, 7, 22}
	c.load("d", p, local)
	pg.Allow(1)
	if !dg.WaitStarted(1, 5*time.Second) {
		st, en := pg.Counts()
		t.Fatalf("chunk 0's scatter did not start: posted %d, prefill copies %d/%d, results %v", c.fab.Counters().Posted, st, en, c.cons[0].Drain())
	}
	require.Equal(t, uint64(1), c.fab.Counters().Posted)
	pg.Allow(1)
	eventually(t, func() bool { return c.fab.Counters().Posted == 2 })
	started, ended := dg.Counts()
	require.Equal(t, 1, started)
	require.Zero(t, ended, "chunk 1's READ was posted while chunk 0 was still being scattered")
	pg.Open()
	dg.Open()
	r := c.result("d")[0]
	require.NoError(t, r.Err)
	c.verify(7, local, 0, 64)
	require.Equal(t, map[string]int{"r": 1}, c.freed(1)[0])
}
