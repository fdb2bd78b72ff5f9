package pullconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Two loads of one remote request on one decode rank while the first is in
// flight (a retry under a new local id): the first one's completion may let
// prefill free the blocks the second still reads. The second is refused
// (found in review: it was reported done with reused blocks' bytes).
func TestSecondLoadOfALoadingRequestRefused(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{
		fabric:     []loopback.FabricOption{loopback.WithClock(clk), loopback.WithModel(loopback.FixedLatency(10 * time.Millisecond))},
		prefillCfg: withClock(clk), decodeCfg: withClock(clk),
	})
	c.fill(7, []int{1, 2}, 32)
	p := c.finish("req-1", []int{1, 2})
	require.NoError(t, c.cons[0].Load("a", p, []int{5, 6}))
	require.Eventually(t, func() bool { return c.fab.Counters().Posted == 1 }, 5*time.Second, time.Millisecond)
	err := c.cons[0].Load("b", p, []int{8, 9})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.Equal(t, `pullconn: invalid argument: request "b": remote request "req-1" of engine "prefill" is already loading on this rank (as request "a")`, err.Error())
	assert.ErrorIs(t, c.cons[0].KeepAlive("b", p), connector.ErrInvalid, "nor kept alive")
	clk.Advance(20 * time.Millisecond)
	res := c.result("a")
	require.NoError(t, res[0].Err)
	c.verify(7, []int{5, 6}, 0, 32)
	assert.ErrorIs(t, c.cons[0].Load("b", p, []int{8, 9}), connector.ErrInvalid, "read already: still refused")
}

// Ranks with different leases: every rank advertises the first rank's
// deadline, so a rank whose own lease is shorter holds until that deadline
// (found in review: rank 1 freed its blocks at 5 s while the Params said
// 30 s, and decode read them as done).
func TestShorterLeaseRankHoldsUntilTheAdvertisedDeadline(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	n := 0
	c := newCluster(t, clusterOpts{
		prefill: side{2, 16},
		prefillCfg: func(rc *Config) {
			rc.Clock = clk
			if n == 2 { // call 0 is newCluster's clock probe, 1 is rank 0
				rc.Lease = 5 * time.Second
			}
			n++
		},
		decodeCfg: withClock(clk),
	})
	c.fill(7, []int{1, 2}, 32)
	p := c.finish("req-1", []int{1, 2})
	clk.Advance(10 * time.Second) // past rank 1's own 5 s lease
	settle()
	assert.Empty(t, c.prods[1].DrainFreed(), "rank 1 holds until the advertised deadline")
	assert.Equal(t, 1, c.prods[1].Held())
	c.load("dreq-1", p, []int{5, 6})
	require.NoError(t, c.result("dreq-1")[0].Err)
	c.verify(7, []int{5, 6}, 0, 32)
}

// A KeepAlive whose prefill engine cannot be reached is dropped after the
// failed handshake, not retried on every reader tick (found in review).
func TestKeepAliveDroppedWhenTheHandshakeFails(t *testing.T) {
	c := newCluster(t, clusterOpts{decodeEngine: func(e *connector.EngineConfig) { e.HandshakeTimeout = 200 * time.Millisecond }})
	p := c.finish("req-1", []int{1})
	p.RemotePort = 1 // nothing listens there
	require.NoError(t, c.cons[0].KeepAlive("dreq-1", p))
	require.Eventually(t, func() bool { v, _ := c.cons[0].Stats().Get("keepalive_timeouts"); return v == 1 }, 10*time.Second, time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, uint64(1), c.cons[0].Stats().FailedHandshakes, "one handshake, not one per tick")
}
