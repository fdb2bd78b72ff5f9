package pullconn

import (
	"testing"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A load whose handshake finishes only after prefill's hold ran out must
// not READ: it used to post the READ once the handshake was done and report
// the freed blocks as the request's (defect 1, load waiting behind a
// handshake).
func TestLoadParkedBehindHandshakePastDeadlineFailsExpired(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefillCfg: withClock(clk)})
	// A second prefill engine whose rank has not started: decode's
	// handshake with it retries until the rank publishes itself.
	late, err := NewEngine(connector.EngineConfig{EngineID: "late", Model: "m", Geometry: testGeometry(1, 16), Clock: clk, HandshakeTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer late.Close()
	p := c.finish("req-1", []int{1})
	p.RemoteEngineID, p.RemotePort = "late", late.Port()
	c.load("dreq-1", p, []int{5})
	time.Sleep(50 * time.Millisecond) // the handshake is retrying now
	assert.Equal(t, 1, c.cons[0].Pending())
	clk.Advance(31 * time.Second)
	a, err := c.fab.NewAgent("late-0")
	require.NoError(t, err)
	defer a.Close()
	buf := c.pbufs[0]
	pr, err := NewProducer(late, Config{RankConfig: connector.RankConfig{Agent: a, Layout: newLayout(buf, 0, 1, 16), StatsInterval: -1}})
	require.NoError(t, err)
	defer pr.Close()
	res := c.result("dreq-1")[0]
	require.ErrorIs(t, res.Err, ErrExpired)
	assert.Contains(t, res.Err.Error(), "before its READ was posted")
	assert.Equal(t, uint64(0), c.fab.Counters().Posted)
}

// Stalled heartbeats (here: none before the hold's deadline) must not let
// decode READ blocks prefill freed meanwhile (defect 1, heartbeats stall).
func TestStalledHeartbeatsNeverReadFreedBlocks(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{
		prefillCfg: withClock(clk),
		decodeCfg:  func(rc *Config) { rc.Clock = clk; rc.HeartbeatInterval = time.Hour; rc.Lease = 2 * time.Hour },
	})
	p := c.finish("req-1", []int{1})
	require.NoError(t, c.cons[0].KeepAlive("dreq-1", p))
	settle()
	clk.Advance(5 * time.Second)
	settle()
	clk.Advance(26 * time.Second) // past the 30 s lease, no heartbeat since
	assert.Equal(t, map[string]int{"req-1": 1}, c.freed(1)[0], "prefill freed the blocks")
	c.load("dreq-1", p, []int{7})
	res := c.result("dreq-1")[0]
	require.ErrorIs(t, res.Err, ErrExpired)
	assert.Equal(t, uint64(0), c.fab.Counters().Posted)
}

// Hold queries confirm heartbeat extensions, so a request that waited far
// past its Params' deadline still loads its bytes, and they are right.
func TestHoldQueriesCarryAWaitPastTheParamsDeadline(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefillCfg: withClock(clk), decodeCfg: withClock(clk)})
	c.fill(7, []int{1, 2}, 32)
	p := c.finish("req-1", []int{1, 2})
	require.NoError(t, c.cons[0].KeepAlive("dreq-1", p))
	queries := func() uint64 { v, _ := c.cons[0].Stats().Get("hold_queries"); return v }
	require.Eventually(t, func() bool { return queries() >= 1 }, 10*time.Second, time.Millisecond)
	for i := 0; i < 12; i++ {
		before := queries()
		clk.Advance(5 * time.Second)
		require.Eventually(t, func() bool { return queries() > before }, 10*time.Second, time.Millisecond)
	}
	c.load("dreq-1", p, []int{8, 9})
	require.NoError(t, c.result("dreq-1")[0].Err)
	c.verify(7, []int{8, 9}, 0, 32)
	assert.Equal(t, uint64(0), c.prods[0].Stats().ExpiredRequests)
}

// Defect 7: a KeepAlive (then called Wait) that no Load or Abort follows used to keep prefill's
// blocks alive forever.
func TestKeepAliveTimesOut(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{
		prefillCfg: withClock(clk),
		decodeCfg:  func(rc *Config) { rc.Clock = clk; rc.KeepAliveTimeout = 40 * time.Second },
	})
	p := c.finish("req-1", []int{1})
	require.NoError(t, c.cons[0].KeepAlive("dreq-1", p))
	for i := 0; i < 16; i++ { // 80 s in heartbeat periods
		clk.Advance(5 * time.Second)
		settle()
	}
	assert.Equal(t, map[string]int{"req-1": 1}, c.freed(1)[0])
	assert.Equal(t, uint64(1), c.prods[0].Stats().ExpiredRequests)
	n, _ := c.cons[0].Stats().Get("keepalive_timeouts")
	assert.Equal(t, uint64(1), n)
}

// Defect 7: per-request abort on decode ends a load at once, exactly once.
func TestConsumerAbort(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefillCfg: withClock(clk)})
	late, err := NewEngine(connector.EngineConfig{EngineID: "late", Model: "m", Geometry: testGeometry(1, 16), HandshakeTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer late.Close()
	p := c.finish("req-1", []int{1})
	p.RemoteEngineID, p.RemotePort = "late", late.Port() // never ready
	c.load("dreq-1", p, []int{5})
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.cons[0].Abort("dreq-1"))
	require.NoError(t, c.cons[0].Abort("dreq-1"), "idempotent")
	require.NoError(t, c.cons[0].Abort("never-loaded"))
	out := c.cons[0].Drain()
	require.Len(t, out, 1, "the result is there at once")
	assert.Equal(t, "dreq-1", out[0].RequestID)
	require.ErrorIs(t, out[0].Err, connector.ErrAborted)
	assert.Equal(t, `pullconn: request aborted: request "dreq-1"`, out[0].Err.Error())
	assert.Equal(t, 0, c.cons[0].Pending())
	n, _ := c.cons[0].Stats().Get("aborted_requests")
	assert.Equal(t, uint64(1), n)
	settle()
	assert.Empty(t, c.cons[0].Drain(), "ended exactly once")
	// The id is free again.
	p2 := c.finish("req-2", []int{2})
	c.load("dreq-1", p2, []int{6})
	require.NoError(t, c.result("dreq-1")[0].Err)
	require.NoError(t, c.cons[0].Close())
	assert.ErrorIs(t, c.cons[0].Abort("x"), connector.ErrClosed)
}

// Prefill Abort stops extensions: the hold ends at the deadline decode was
// given, not later, and decode does not READ after it.
func TestProducerAbortStopsExtensions(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefillCfg: withClock(clk), decodeCfg: withClock(clk)})
	p := c.finish("req-1", []int{1})
	require.NoError(t, c.prods[0].Abort("req-1"))
	require.NoError(t, c.prods[0].Abort("req-1"), "idempotent")
	require.NoError(t, c.cons[0].KeepAlive("dreq-1", p))
	for i := 0; i < 7; i++ {
		clk.Advance(5 * time.Second)
		settle()
	}
	assert.Equal(t, map[string]int{"req-1": 1}, c.freed(1)[0])
	n, _ := c.prods[0].Stats().Get("aborted_requests")
	assert.Equal(t, uint64(1), n)
	c.load("dreq-1", p, []int{7})
	require.ErrorIs(t, c.result("dreq-1")[0].Err, ErrExpired)
	require.NoError(t, c.prods[0].Close())
	assert.ErrorIs(t, c.prods[0].Abort("req-1"), connector.ErrClosed)
}

// A remote request this rank already read (its completion went out, so
// prefill may free the blocks once the other decode ranks have read too)
// is refused when loaded again: found by the campaign under -race, TP 1 ->
// 2, where decode rank 0 loaded a request twice, prefill freed the blocks
// on the second completion, and the second load read reused blocks.
func TestSecondLoadOfAReadRequestRefused(t *testing.T) {
	c := newCluster(t, clusterOpts{decode: side{2, 16}})
	c.fill(3, []int{1}, 16)
	p := c.finish("req-1", []int{1})
	require.NoError(t, c.cons[0].Load("dreq-1", p, []int{4}))
	var out []connector.Result
	require.Eventually(t, func() bool { out = append(out, c.cons[0].Drain()...); return len(out) == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, out[0].Err)
	err := c.cons[0].Load("dreq-1b", p, []int{5})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.Equal(t, `pullconn: invalid argument: request "dreq-1b": remote request "req-1" of engine "prefill" was already read by this rank, and prefill may have freed its blocks since`, err.Error())
	assert.Equal(t, 1, c.prods[0].Held(), "held for decode rank 1")
	require.NoError(t, c.cons[1].Load("dreq-1", p, []int{4}))
	out = nil
	require.Eventually(t, func() bool { out = append(out, c.cons[1].Drain()...); return len(out) == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, out[0].Err)
	c.freed(1)
}
