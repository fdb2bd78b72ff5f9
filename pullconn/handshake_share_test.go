package pullconn

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/handshake"
)

// Two decode ranks of one engine share the engine's handshake with a
// prefill engine. Closing the rank that asked first must not fail the
// other rank's load with "context canceled": the other rank fails only at
// the handshake timeout, as if it were alone.
func TestClosingOneRankDoesNotFailAnothersHandshake(t *testing.T) {
	c := newCluster(t, clusterOpts{decode: side{2, 16}, decodeEngine: func(e *connector.EngineConfig) { e.HandshakeTimeout = time.Second }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := make(chan net.Conn, 8)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- conn // silent: never answers
		}
	}()
	defer func() {
		ln.Close()
		for conn := range conns {
			conn.Close()
		}
	}()
	p := c.finish("req-1", []int{1})
	p.RemotePort = ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, c.cons[0].Load("d", p, []int{7}))
	time.Sleep(100 * time.Millisecond) // rank 0 started the fetch
	require.NoError(t, c.cons[1].Load("d", p, []int{7}))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, c.cons[0].Close())
	got := c.cons[0].Drain()
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0].Err, connector.ErrClosed, "rank 0's own load ends with the close")
	require.Zero(t, c.cons[0].Stats().FailedHandshakes, "a handshake cut short by Close did not fail")

	deadline := time.Now().Add(5 * time.Second)
	var res []connector.Result
	for len(res) == 0 && time.Now().Before(deadline) {
		res = c.cons[1].Drain()
		time.Sleep(time.Millisecond)
	}
	require.Len(t, res, 1)
	require.NotErrorIs(t, res[0].Err, context.Canceled, "rank 1 was not closed: %v", res[0].Err)
	require.ErrorIs(t, res[0].Err, handshake.ErrFailed)
	require.ErrorIs(t, res[0].Err, context.DeadlineExceeded, "it ran into the handshake timeout: %v", res[0].Err)
}
