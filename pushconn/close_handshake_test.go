package pushconn

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// gatedRounds stands between a decode rank and its agent. Once armed, the
// next poller round waits in GetNotifs (it tells entered) until release
// says it may go on: a test runs Close while a round is under way, as a
// busy machine does at random.
type gatedRounds struct {
	nixl.Agent
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release func() bool
}

func (a *gatedRounds) GetNotifs(opts *nixl.Options) (nixl.Notifs, error) {
	a.mu.Lock()
	armed := a.armed
	a.armed = false
	a.mu.Unlock()
	if armed {
		close(a.entered)
		for deadline := time.Now().Add(10 * time.Second); !a.release() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	return a.Agent.GetNotifs(opts)
}

// silentSideChannel accepts connections and never answers: a handshake
// with it waits until its context ends.
func silentSideChannel(t *testing.T) (port int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// Issue 35: Consumer.Close cancels the handshakes in flight; a poller round
// that ran between the cancel and the poller's stop took the cancelled
// handshake for a failed one and ended its waiting requests with "context
// canceled", neither ErrClosed nor ErrHandshake (2-3 runs in 10). Here the
// round is held until the cancelled handshake is back, every time.
func TestCloseDuringHandshakeEndsRequestsWithErrClosed(t *testing.T) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	t.Cleanup(func() { fab.Close() })
	e, err := NewEngine(connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: testGeometry(1, 16, numBlocks), HandshakeTimeout: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	a, err := fab.NewAgent("decode-0")
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	l := testLayout(t, 1, 0, 16, numBlocks)
	t.Cleanup(func() { freeLayout(l) })
	var c *Consumer
	gate := &gatedRounds{Agent: a, entered: make(chan struct{}), release: func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.shakes) > 0 // the cancelled handshake is back
	}}
	c, err = NewConsumer(e, Config{RankConfig: connector.RankConfig{Agent: gate, Layout: l, IdleInterval: time.Millisecond}})
	require.NoError(t, err)

	port := silentSideChannel(t)
	require.NoError(t, c.Register("x", Prefill{EngineID: "prefill", Host: "127.0.0.1", Port: port, TPSize: 1, PPSize: 1}, []int{4}))
	// The request waits behind the handshake once a round has routed it.
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.inbox) == 0
	}, 10*time.Second, time.Millisecond)
	gate.mu.Lock()
	gate.armed = true
	gate.mu.Unlock()
	<-gate.entered
	require.NoError(t, c.Close())

	res := c.Drain()
	require.Len(t, res, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrClosed, "got %v", res[0].Err)
	assert.Zero(t, c.Stats().FailedHandshakes, "Close cancelled the handshake: it did not fail")
}
