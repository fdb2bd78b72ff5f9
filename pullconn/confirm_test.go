package pullconn

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// The attacks of the second correctness round: each of them used to give a
// done result carrying another request's bytes. Since a decode rank reports
// a load done only once prefill confirmed, after the READ, that it still
// held exactly that request for this reader, each now fails the load with
// ErrNotHeld (or is refused earlier) and never reports wrong bytes.

// notDoneOrRight fails the test when res is done but decode's blocks do not
// hold request seed's bytes, and returns res.Err.
func (c *cluster) notDoneOrRight(res connector.Result, seed int, blocks []int, tokens int) error {
	c.t.Helper()
	if res.Err == nil {
		c.verify(seed, blocks, 0, tokens)
	}
	return res.Err
}

// rewrite overwrites prefill's blocks with another request's bytes, as an
// engine that reused freed blocks does.
func (c *cluster) rewrite(seed int, blocks []int, tokens int) { c.fill(seed, blocks, tokens) }

// Attack 1: prefill's clock steps forward after the handshake measured the
// offset. Decode still believes the hold lasts; prefill's lease ran out and
// the blocks were reused.
func TestClockStepAfterHandshakeNeverDoneOnFreedBlocks(t *testing.T) {
	for _, tc := range []struct {
		name           string
		prefill, dcode time.Duration // steps after the first load
	}{
		{"prefill+1.5s", 1500 * time.Millisecond, 0},
		{"prefill+5s", 5 * time.Second, 0},
		{"decode-5s", 0, -5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc, dc := connector.NewManualClock(time.Unix(1000, 0)), connector.NewManualClock(time.Unix(1000, 0))
			c := newCluster(t, clusterOpts{
				prefillCfg: func(rc *Config) { rc.Clock = pc; rc.Lease = 3 * time.Second },
				decodeCfg:  func(rc *Config) { rc.Clock = dc; rc.HeartbeatInterval = time.Hour; rc.Lease = 2 * time.Hour },
			})
			c.fill(1, []int{1}, 16)
			c.load("d1", c.finish("r1", []int{1}), []int{5})
			require.NoError(t, c.result("d1")[0].Err)
			c.freed(1)

			pc.Step(tc.prefill)
			dc.Step(tc.dcode)
			c.fill(2, []int{2}, 16)
			p := c.finish("r2", []int{2})
			pc.Advance(3200 * time.Millisecond)
			dc.Advance(3200 * time.Millisecond)
			require.Equal(t, map[string]int{"r2": 1}, c.freed(1)[0], "prefill's lease ran out")
			c.rewrite(99, []int{2}, 16)
			c.load("d2", p, []int{6})
			err := c.notDoneOrRight(c.result("d2")[0], 2, []int{6}, 16)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrNotHeld) || errors.Is(err, ErrExpired), "%v", err)
		})
	}
}

// Attack 1b: prefill's clock steps forward while the READ is in flight,
// far past the hold's lease. The READ is pinned: prefill keeps the blocks
// until decode's completion (or the pin's end, on the monotonic clock), so
// the load is done with the right bytes; had the pin arrived after the
// step, the load would fail with ErrNotHeld instead. Either way the blocks
// are freed once.
func TestClockStepDuringReadNeverDoneOnFreedBlocks(t *testing.T) {
	pc := connector.NewManualClock(time.Unix(1000, 0))
	// Every READ takes 200 ms; its bytes are copied at its end.
	c := newCluster(t, clusterOpts{
		fabric:     []loopback.FabricOption{loopback.WithModel(loopback.FixedLatency(200 * time.Millisecond))},
		prefillCfg: func(rc *Config) { rc.Clock = pc; rc.Lease = 3 * time.Second },
		decodeCfg:  func(rc *Config) { rc.HeartbeatInterval = time.Hour; rc.Lease = 2 * time.Hour },
	})
	c.fill(2, []int{2}, 16)
	p := c.finish("r2", []int{2})
	c.load("d2", p, []int{6})
	time.Sleep(100 * time.Millisecond)
	pc.Advance(5 * time.Second)
	settle()
	assert.Empty(t, c.prods[0].DrainFreed(), "the pinned hold outlives its lease")
	if err := c.notDoneOrRight(c.result("d2")[0], 2, []int{6}, 16); err != nil {
		require.ErrorIs(t, err, ErrNotHeld)
	}
	assert.Equal(t, map[string]int{"r2": 1}, c.freed(1)[0])
}

// A stale completion of an earlier hold of the same id (a late copy) does
// not release a later, pinned hold of the id while its READ runs.
func TestLateCompletionOfAnEarlierHoldDoesNotReleaseAPinnedOne(t *testing.T) {
	c := newCluster(t, clusterOpts{
		fabric: []loopback.FabricOption{loopback.WithModel(loopback.FixedLatency(200 * time.Millisecond))},
	})
	c.fill(1, []int{1}, 16)
	first := c.finish("r", []int{1})
	c.load("d1", first, []int{5})
	require.NoError(t, c.result("d1")[0].Err)
	require.Equal(t, map[string]int{"r": 1}, c.freed(1)[0])
	// The same id again, another hold (another deadline, so another key).
	c.fill(2, []int{3}, 16)
	time.Sleep(2 * time.Millisecond)
	second := c.finish("r", []int{3})
	require.NotEqual(t, first.holdKey(), second.holdKey())
	c.load("d2", second, []int{7})
	time.Sleep(50 * time.Millisecond) // the READ runs, pinned
	// The copy travels the link behind the READ and ahead of decode's own
	// completion of the second hold.
	stale, err := notif.EncodeSeqCompletion("r", 1, first.holdKey())
	require.NoError(t, err)
	require.NoError(t, c.dagents[0].GenNotif(c.pagents[0].Name(), stale, nil))
	require.Eventually(t, func() bool { st, _ := c.prods[0].Stats().Get("stale_completions"); return st == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 1, c.prods[0].Held(), "the late copy released nothing")
	require.NoError(t, c.result("d2")[0].Err)
	c.verify(2, []int{7}, 0, 16)
}

// Attack 2: Params that name a request prefill never finished, or blocks
// the named request does not hold. Neither is done, and neither frees the
// real request it names.
func TestForgedParamsNeverDone(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	c.fill(1, []int{1, 2}, 32)
	real := c.finish("r", []int{1, 2})
	c.fill(7, []int{3, 4}, 32)

	never := real
	never.RemoteRequestID = "never-finished"
	c.load("f1", never, []int{10, 11})
	require.ErrorIs(t, c.notDoneOrRight(c.result("f1")[0], 1, []int{10, 11}, 32), ErrNotHeld)

	other := real
	other.RemoteBlockIDs = []int{3, 4}
	c.load("f2", other, []int{12, 13})
	err := c.notDoneOrRight(c.result("f2")[0], 7, []int{12, 13}, 32)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Contains(t, err.Error(), `prefill engine "prefill" does not hold request "r"`)
	settle()
	assert.Equal(t, 1, c.prods[0].Held(), "the forged loads freed nothing")
	assert.Empty(t, c.prods[0].DrainFreed())
	nh, _ := c.cons[0].Stats().Get("not_held")
	assert.Equal(t, uint64(2), nh)

	c.load("d", real, []int{20, 21})
	require.NoError(t, c.result("d")[0].Err)
	c.verify(1, []int{20, 21}, 0, 32)
	assert.Equal(t, map[string]int{"r": 1}, c.freed(1)[0])
}

// Attack 3: decode engine A read the request; prefill freed it and reused
// the blocks; the same Params replayed to decode engine B (a proxy retrying
// the decode leg elsewhere) must not be done.
func TestParamsReplayedToASecondDecodeEngine(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	b := c.secondDecode(t, "decode-b")
	c.fill(1, []int{1}, 16)
	p := c.finish("r", []int{1})
	c.load("d", p, []int{5})
	require.NoError(t, c.result("d")[0].Err)
	c.verify(1, []int{5}, 0, 16)
	require.Equal(t, map[string]int{"r": 1}, c.freed(1)[0])
	c.rewrite(2, []int{1}, 16)

	require.NoError(t, b.cons.Load("d", p, []int{5}))
	res := b.result(t, "d")
	require.ErrorIs(t, res.Err, ErrNotHeld)
}

// Attack 3b: both engines load the same Params while prefill still holds
// them: at most one is done, with the right bytes.
func TestParamsLoadedByTwoDecodeEnginesAtOnce(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	b := c.secondDecode(t, "decode-b")
	c.fill(1, []int{1}, 16)
	p := c.finish("r", []int{1})
	c.load("d", p, []int{5})
	require.NoError(t, b.cons.Load("d", p, []int{5}))
	ra, rb := c.result("d")[0], b.result(t, "d")
	done := 0
	for _, r := range []connector.Result{ra, rb} {
		if r.Err == nil {
			done++
		} else {
			require.ErrorIs(t, r.Err, ErrNotHeld)
		}
	}
	require.LessOrEqual(t, done, 1)
	if ra.Err == nil {
		c.verify(1, []int{5}, 0, 16)
	}
}

// Attack 6: one prefill rank's background gather failed (its second
// chunk), while the other rank's went through and the engine handed the
// Params (naming the slot) to decode: never done, ErrStaging.
func TestStagingCopyFailedOnOneRankNeverDone(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	failing := &stagingtest.Copier{FailAt: 2} // rank 1's second chunk
	c := stagedCluster(t, clusterOpts{prefill: side{2, 16},
		prefillCfg: func(rc *Config) {
			rc.ParamsAfterAllRanks = true
			if rc.Layout.TPRank == 1 {
				rc.Staging.Copier = failing
			}
		}}, m)
	blocks := []int{9, 2, 40}
	c.fill(1, blocks, 48)
	p := c.finish("x", blocks)
	require.NotNil(t, p.RemoteStagingSlot)
	c.load("dx", p, []int{1, 3, 5})
	err := c.notDoneOrRight(c.result("dx")[0], 1, []int{1, 3, 5}, 48)
	require.ErrorIs(t, err, connector.ErrStaging)
	require.ErrorContains(t, err, "prefill rank 1's gather into its staging slot failed")
}

// extraDecode is a second decode engine with one rank on the cluster's
// fabric.
type extraDecode struct {
	e    *connector.Engine
	cons *Consumer
	buf  *nixl.Buffer
}

func (c *cluster) secondDecode(t *testing.T, id string) *extraDecode {
	t.Helper()
	e, err := NewEngine(connector.EngineConfig{EngineID: id, Model: "m", Geometry: testGeometry(1, 16), HandshakeTimeout: 2 * time.Second})
	require.NoError(t, err)
	a, err := c.fab.NewAgent(id + "-0")
	require.NoError(t, err)
	buf, err := nixl.AllocBuffer(layoutBytes(1, 16))
	require.NoError(t, err)
	cn, err := NewConsumer(e, Config{RankConfig: connector.RankConfig{Agent: a, Layout: newLayout(buf, 0, 1, 16), StatsInterval: -1}})
	require.NoError(t, err)
	t.Cleanup(func() {
		cn.Close()
		e.Close()
		a.Close()
		buf.Free()
	})
	return &extraDecode{e: e, cons: cn, buf: buf}
}

func (x *extraDecode) result(t *testing.T, id string) connector.Result {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range x.cons.Drain() {
			if r.RequestID == id {
				return r
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatalf("no result for %q", id)
	return connector.Result{}
}
