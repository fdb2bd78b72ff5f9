package pullconn

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/sidechannel"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func withClock(clk connector.Clock) func(*Config) {
	return func(c *Config) { c.Clock = clk }
}

func TestLeaseExpiresWhenDecodeNeverReads(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefill: side{2, 16}, prefillCfg: withClock(clk)})
	c.finish("req-1", []int{1, 2})
	clk.Advance(29 * time.Second)
	settle()
	for _, p := range c.prods {
		assert.Empty(t, p.DrainFreed())
		assert.Equal(t, 1, p.Held())
	}
	clk.Advance(time.Second)
	freed := c.freed(1)
	for r, p := range c.prods {
		assert.Equal(t, map[string]int{"req-1": 1}, freed[r])
		assert.Equal(t, uint64(1), p.Stats().ExpiredRequests)
	}
	clk.Advance(time.Minute)
	settle()
	for _, p := range c.prods {
		assert.Empty(t, p.DrainFreed(), "released once")
		assert.Equal(t, uint64(1), p.Stats().ExpiredRequests)
	}
}

// Defect 1 of the correctness issue: a Load after prefill's lease used to
// READ blocks prefill had already freed and report the request done.
func TestLoadAfterLeaseFailsExpired(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefillCfg: withClock(clk)})
	p := c.finish("req-1", []int{1})
	clk.Advance(31 * time.Second)
	c.freed(1)
	c.load("dreq-1", p, []int{5})
	res := c.result("dreq-1")[0]
	require.ErrorIs(t, res.Err, ErrExpired)
	assert.Contains(t, res.Err.Error(), `request "dreq-1": prefill engine "prefill" holds its blocks until`)
	assert.Contains(t, res.Err.Error(), "before its READ was posted")
	assert.Equal(t, uint64(0), c.fab.Counters().Posted, "no READ of freed blocks")
	assert.Equal(t, uint64(1), c.cons[0].Stats().ExpiredRequests)
}

func TestLateCompletionAfterExpiryCountedAndIgnored(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefillCfg: withClock(clk)})
	c.finish("req-1", []int{1})
	clk.Advance(31 * time.Second)
	c.freed(1)
	require.NoError(t, loadPeer(c.dagents[0], c.pagents[0]))
	require.NoError(t, c.dagents[0].GenNotif("prefill-0", []byte("req-1:1"), nil))
	require.Eventually(t, func() bool { return c.prods[0].Stats().LateNotifications == 1 }, 10*time.Second, time.Millisecond)
	settle()
	assert.Empty(t, c.prods[0].DrainFreed(), "nothing freed twice")
	s := c.prods[0].Stats()
	assert.Equal(t, uint64(1), s.ExpiredRequests)
	assert.Equal(t, uint64(0), s.UnknownNotifications)
	assert.Equal(t, 0, c.prods[0].Held())
}

func TestUnknownCompletionCounted(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	c.finish("held", []int{1})
	msg := []byte("never-finished:1")
	require.NoError(t, loadPeer(c.dagents[0], c.pagents[0]))
	require.NoError(t, c.dagents[0].GenNotif("prefill-0", msg, nil))
	require.Eventually(t, func() bool { return c.prods[0].Stats().UnknownNotifications == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 1, c.prods[0].Held(), "the held request is untouched")
}

func loadPeer(from, to nixl.Agent) error {
	md, err := to.LocalMD()
	if err != nil {
		return err
	}
	_, err = from.LoadRemoteMD(md)
	return err
}

func TestReadFailsInFlight(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	for _, policy := range []connector.Policy{connector.PolicyFail, connector.PolicyRecompute} {
		t.Run(string(policy), func(t *testing.T) {
			c := newCluster(t, clusterOpts{
				prefillCfg: withClock(clk),
				decodeCfg:  func(rc *Config) { rc.FailurePolicy = policy },
			})
			_, err := c.fab.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "decode-0", Status: nixl.StatusBackend})
			require.NoError(t, err)
			p := c.finish("req-1", []int{1, 2})
			c.load("dreq-1", p, []int{7, 8})
			r := c.result("dreq-1")[0]
			require.Error(t, r.Err)
			assert.ErrorIs(t, r.Err, ErrTransfer)
			assert.ErrorIs(t, r.Err, nixl.ErrBackend)
			assert.ErrorContains(t, r.Err, `READ from engine "prefill" rank 0`)
			if policy == connector.PolicyRecompute {
				assert.Equal(t, []int{7, 8}, r.InvalidBlocks)
			} else {
				assert.Nil(t, r.InvalidBlocks)
			}
			assert.Equal(t, uint64(1), c.cons[0].Stats().FailedTransfers)
			// No completion reached prefill: the lease frees the blocks.
			settle()
			assert.Empty(t, c.prods[0].DrainFreed())
			clk.Advance(31 * time.Second)
			assert.Equal(t, map[string]int{"req-1": 1}, c.freed(1)[0])
			assert.Equal(t, uint64(1), c.prods[0].Stats().ExpiredRequests)
		})
	}
}

func TestPostFailure(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	_, err := c.fab.AddFault(loopback.Fault{Kind: loopback.FailPost, From: "decode-0", Count: 1})
	require.NoError(t, err)
	p := c.finish("req-1", []int{1})
	c.load("dreq-1", p, []int{7})
	r := c.result("dreq-1")[0]
	assert.ErrorIs(t, r.Err, ErrTransfer)
	assert.Equal(t, uint64(1), c.cons[0].Stats().FailedTransfers)
	// The next request goes through: the engine is still known.
	p2 := c.finish("req-2", []int{2})
	c.load("dreq-2", p2, []int{8})
	require.NoError(t, c.result("dreq-2")[0].Err)
}

func TestPrefillDisconnectsMidTransfer(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{
		fabric:     []loopback.FabricOption{loopback.WithModel(loopback.FixedLatency(time.Hour))},
		prefillCfg: withClock(clk),
		// The READ is pinned for TransferTimeout + ExpiryMargin: keep that
		// short, so the hold can end by lease within the test.
		decodeCfg: func(rc *Config) {
			rc.TransferTimeout = 200 * time.Millisecond
			rc.ExpiryMargin = 50 * time.Millisecond
		},
	})
	p := c.finish("req-1", []int{1})
	c.load("dreq-1", p, []int{7})
	require.Eventually(t, func() bool { return c.fab.Counters().Posted == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.fab.Disconnect("prefill-0"))
	r := c.result("dreq-1")[0]
	assert.ErrorIs(t, r.Err, ErrTransfer)
	assert.ErrorIs(t, r.Err, nixl.ErrRemoteDisconnect)
	assert.Equal(t, uint64(1), c.cons[0].Stats().FailedTransfers)
	// Prefill frees by lease. A hold query the load sent before it failed
	// travels over the side channel, which the disconnect does not cut,
	// and may extend the hold once more (by 2/3 of the lease): step the
	// clock until the lease runs out.
	var freed []string
	require.Eventually(t, func() bool {
		clk.Advance(31 * time.Second)
		freed = append(freed, c.prods[0].DrainFreed()...)
		return len(freed) > 0
	}, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"req-1"}, freed)

	// Once prefill is back, the next request handshakes again (decode
	// forgot the agent's metadata at the disconnect) and its completion is
	// sent. The link is still an hour long, so this is a prefix hit, which
	// needs no READ, and the notification is seen leaving, not arriving.
	require.NoError(t, c.fab.Reconnect("prefill-0"))
	sent := c.fab.Counters().NotifsSent
	// A heartbeat for dreq-1 may have met the disconnect: count from here.
	failedBefore := c.cons[0].Stats().FailedNotifications
	p2 := c.finish("req-2", []int{2})
	c.load("dreq-2", p2, nil)
	require.NoError(t, c.result("dreq-2")[0].Err)
	assert.Equal(t, sent+1, c.fab.Counters().NotifsSent)
	assert.Equal(t, failedBefore, c.cons[0].Stats().FailedNotifications)
}

func TestHandshakeToDeadAddressFailsWithinDeadline(t *testing.T) {
	c := newCluster(t, clusterOpts{decodeEngine: func(e *connector.EngineConfig) { e.HandshakeTimeout = 300 * time.Millisecond }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p := c.finish("req-1", []int{1})
	p.RemotePort = port
	start := time.Now()
	c.load("dreq-1", p, []int{7})
	r := c.result("dreq-1")[0]
	assert.ErrorIs(t, r.Err, connector.ErrHandshake)
	assert.ErrorContains(t, r.Err, `engine "prefill" at 127.0.0.1:`)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, uint64(1), c.cons[0].Stats().FailedHandshakes)
}

func TestHandshakeToSilentServerFailsAtDeadline(t *testing.T) {
	c := newCluster(t, clusterOpts{decodeEngine: func(e *connector.EngineConfig) { e.HandshakeTimeout = 200 * time.Millisecond }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			accepted <- conn
		}
		close(accepted)
	}()
	defer func() {
		ln.Close()
		for conn := range accepted {
			conn.Close()
		}
	}()
	p := c.finish("req-1", []int{1})
	p.RemotePort = ln.Addr().(*net.TCPAddr).Port
	c.load("dreq-1", p, []int{7})
	r := c.result("dreq-1")[0]
	assert.ErrorIs(t, r.Err, connector.ErrHandshake)
	assert.ErrorContains(t, r.Err, "deadline exceeded")
}

func TestMismatchedCompatibilityRefused(t *testing.T) {
	c := newCluster(t, clusterOpts{decodeEngine: func(e *connector.EngineConfig) { e.Model = "other-model" }})
	p := c.finish("req-1", []int{1})
	c.load("dreq-1", p, []int{7})
	r := c.result("dreq-1")[0]
	assert.ErrorIs(t, r.Err, connector.ErrIncompatible)
	assert.ErrorContains(t, r.Err, `model mismatch: local "other-model", remote "m"`)
	assert.Equal(t, uint64(0), c.fab.Counters().Posted, "no transfer")
	assert.Equal(t, uint64(1), c.cons[0].Stats().FailedHandshakes)
	assert.Equal(t, uint64(1), c.pe.Stats().FailedHandshakes, "prefill refused too")
}

func TestPushEngineRefusedAtHandshake(t *testing.T) {
	// A push-mode decode engine handshaking with this pull prefill engine.
	c := newCluster(t, clusterOpts{})
	push := handshake.Compat{Version: handshake.Version, Model: "m", DType: "bfloat16", Layout: "HND", Mode: handshake.ModePush}
	cl, err := handshake.NewClient("push-decode", push, time.Second, 0)
	require.NoError(t, err)
	_, err = cl.Get(t.Context(), "prefill", net.JoinHostPort(c.pe.Host(), itoa(c.pe.Port())))
	assert.ErrorIs(t, err, connector.ErrIncompatible)
	assert.ErrorContains(t, err, `transfer mode mismatch: local "push", remote "pull"`)
	assert.Equal(t, uint64(1), c.pe.Stats().FailedHandshakes)
}

func TestMalformedSideChannelFramesCounted(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	addr := net.JoinHostPort(c.pe.Host(), itoa(c.pe.Port()))
	for _, raw := range [][]byte{
		{0, 0, 0, 2, 0xc1, 0xc1},
		{0xff, 0xff, 0xff, 0xff},
		{0, 0, 0, 1, 0x07},
	} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conn.Write(raw)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		assert.Error(t, err, "connection closed after %x", raw)
		conn.Close()
	}
	assert.Equal(t, uint64(3), c.pe.Stats().MalformedFrames)
	// The engine still serves: a real load works.
	p := c.finish("req-1", []int{1})
	c.load("dreq-1", p, []int{7})
	require.NoError(t, c.result("dreq-1")[0].Err)
	_ = sidechannel.DefaultMaxFrame
}

func TestMalformedNotificationsCountedNoStateChange(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := c.finish("req-1", []int{1})
	require.NoError(t, loadPeer(c.dagents[0], c.pagents[0]))
	bad := [][]byte{[]byte("req-1"), []byte("req-1:0"), []byte("req-1:x"), []byte("HB:"), []byte("HB:a,,b"), []byte(":1"), {0xff, ':'}}
	for _, m := range bad {
		require.NoError(t, c.dagents[0].GenNotif("prefill-0", m, nil))
	}
	require.Eventually(t, func() bool { return c.prods[0].Stats().MalformedNotifications == uint64(len(bad)) }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 1, c.prods[0].Held())
	assert.Empty(t, c.prods[0].DrainFreed())
	// The request still completes normally.
	c.load("dreq-1", p, []int{7})
	require.NoError(t, c.result("dreq-1")[0].Err)
	assert.Equal(t, map[string]int{"req-1": 1}, c.freed(1)[0])
}

func TestHeartbeatsKeepWaitingRequestAlive(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefillCfg: withClock(clk), decodeCfg: withClock(clk)})
	p := c.finish("req-1", []int{1})
	require.NoError(t, c.cons[0].KeepAlive("dreq-1", p))
	// Let the handshake finish and the first heartbeat go.
	hbs := func() uint64 { return c.fab.Counters().NotifsDelivered }
	require.Eventually(t, func() bool { return hbs() >= 1 }, 10*time.Second, time.Millisecond)
	// 60 s of waiting in 5 s steps (lease/6): every step sends a heartbeat
	// that extends the 30 s lease by 20 s.
	for i := 0; i < 12; i++ {
		before := hbs()
		clk.Advance(5 * time.Second)
		require.Eventually(t, func() bool { return hbs() > before }, 10*time.Second, time.Millisecond)
		settle()
		require.Equal(t, 1, c.prods[0].Held(), "step %d", i)
	}
	assert.Equal(t, uint64(0), c.prods[0].Stats().ExpiredRequests)
	c.load("dreq-1", p, []int{7})
	require.NoError(t, c.result("dreq-1")[0].Err)
	assert.Equal(t, map[string]int{"req-1": 1}, c.freed(1)[0])
	assert.Equal(t, uint64(0), c.prods[0].Stats().ExpiredRequests)
}

func TestHeartbeatsStopAfterAbort(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{prefillCfg: withClock(clk), decodeCfg: withClock(clk)})
	p := c.finish("req-1", []int{1})
	require.NoError(t, c.cons[0].KeepAlive("dreq-1", p))
	require.Eventually(t, func() bool { return c.fab.Counters().NotifsDelivered >= 1 }, 10*time.Second, time.Millisecond)
	c.cons[0].Abort("dreq-1")
	for i := 0; i < 7; i++ {
		clk.Advance(5 * time.Second)
		settle()
	}
	assert.Equal(t, map[string]int{"req-1": 1}, c.freed(1)[0])
	assert.Equal(t, uint64(1), c.prods[0].Stats().ExpiredRequests)
}

func TestTransferTimeout(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(1000, 0))
	c := newCluster(t, clusterOpts{
		fabric:    []loopback.FabricOption{loopback.WithModel(loopback.FixedLatency(time.Hour))},
		decodeCfg: func(rc *Config) { rc.Clock = clk; rc.TransferTimeout = 10 * time.Second },
	})
	p := c.finish("req-1", []int{1})
	c.load("dreq-1", p, []int{7})
	require.Eventually(t, func() bool { return c.fab.Counters().Posted == 1 }, 10*time.Second, time.Millisecond)
	clk.Advance(10 * time.Second)
	r := c.result("dreq-1")[0]
	assert.ErrorIs(t, r.Err, ErrTimeout)
	assert.ErrorContains(t, r.Err, "still in flight after 10s")
	require.Eventually(t, func() bool { return c.fab.Counters().Cancelled == 1 }, 10*time.Second, time.Millisecond)
}

func TestCloseEndsPendingRequests(t *testing.T) {
	c := newCluster(t, clusterOpts{fabric: []loopback.FabricOption{loopback.WithModel(loopback.FixedLatency(time.Hour))}})
	p := c.finish("req-1", []int{1})
	c.load("dreq-1", p, []int{7})
	require.Eventually(t, func() bool { return c.fab.Counters().Posted == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.cons[0].Close())
	require.NoError(t, c.cons[0].Close())
	rs := c.cons[0].Drain()
	require.Len(t, rs, 1)
	assert.ErrorIs(t, rs[0].Err, connector.ErrClosed)
	assert.ErrorIs(t, c.cons[0].Load("dreq-2", p, nil), connector.ErrClosed)
	require.NoError(t, c.prods[0].Close())
	assert.Equal(t, []string{"req-1"}, c.prods[0].DrainFreed())
	_, err := c.prods[0].RequestFinished("req-3", nil)
	assert.ErrorIs(t, err, connector.ErrClosed)
}
