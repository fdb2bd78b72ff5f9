package sidechannel

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closedConn is a served connection the server sees end at once: the
// server closes it without reading a request, as it closes an idle one.
type closedConn struct{ net.Conn }

func (closedConn) Read([]byte) (int, error) { return 0, io.EOF }

// countingServer listens with echo, counts the connections it serves and
// closes the first closeFirst of them without reading, signalling closed
// for each.
func countingServer(t *testing.T, closeFirst int64, closed chan<- struct{}) (*Server[ping, pong], *atomic.Int64) {
	t.Helper()
	var served atomic.Int64
	s := listen(t, ServerOptions{IdleTimeout: time.Hour, testHookConn: func(c net.Conn) net.Conn {
		if served.Add(1) <= closeFirst {
			closed <- struct{}{}
			return closedConn{c}
		}
		return c
	}})
	return s, &served
}

func callPooled(t *testing.T, p *Pool, addr string, n int) (pong, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return CallPooled[ping, pong](ctx, p, addr, ping{Name: "decode", N: n}, 0, time.Second)
}

// The reported failure: after a long idle every kept connection has been
// closed by the server; the retry must dial, not take the next kept one.
func TestPooledCallRetriesOnFreshConnection(t *testing.T) {
	closed := make(chan struct{}, 2)
	s, served := countingServer(t, 2, closed)
	addr := s.Addr().String()
	var p Pool
	defer p.Close()
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		p.put(addr, c)
	}
	for range 2 {
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not take the kept connections")
		}
	}

	got, err := callPooled(t, &p, addr, 21)
	require.NoError(t, err)
	assert.Equal(t, pong{Greeting: "hello decode", Double: 42}, got)
	assert.Equal(t, int64(3), served.Load(), "the retry dials a third connection")
	p.mu.Lock()
	assert.Len(t, p.idle[addr], 1, "the connections kept before the failed one are dropped; the new one is kept")
	p.mu.Unlock()
}

// A kept connection idle for the pool's IdleTimeout is closed, not reused,
// so the client never races the server's own idle close.
func TestPoolDropsConnectionsIdleForItsTimeout(t *testing.T) {
	s, served := countingServer(t, 0, nil)
	addr := s.Addr().String()
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	p := Pool{IdleTimeout: 10 * time.Second, now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	defer p.Close()
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	_, err := callPooled(t, &p, addr, 1)
	require.NoError(t, err)
	advance(10*time.Second - time.Nanosecond)
	_, err = callPooled(t, &p, addr, 2)
	require.NoError(t, err)
	assert.Equal(t, int64(1), served.Load(), "idle for just under the timeout: reused")

	p.mu.Lock()
	kept := p.idle[addr][0].c
	p.mu.Unlock()
	advance(10 * time.Second)
	got, err := callPooled(t, &p, addr, 3)
	require.NoError(t, err)
	assert.Equal(t, 6, got.Double)
	assert.Equal(t, int64(2), served.Load(), "idle for the timeout: a new connection")
	_, err = kept.Write([]byte{0})
	assert.ErrorIs(t, err, net.ErrClosed, "the stale connection was closed by the pool")
}

// The pool's default idle timeout is well below the server's default idle
// close, and a Pool's zero value uses it.
func TestPoolIdleTimeoutBelowServers(t *testing.T) {
	var o ServerOptions
	o.fill()
	assert.Equal(t, DefaultServerIdleTimeout, o.IdleTimeout)
	assert.LessOrEqual(t, 2*DefaultPoolIdleTimeout, o.IdleTimeout)
	var p Pool
	assert.Equal(t, DefaultPoolIdleTimeout, p.idleTimeout())
}

// Only a connection closed before any byte of the reply is retried: a
// reply cut short is the server's answer going wrong, and is reported.
func TestPooledCallDoesNotRetryCutReply(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var accepted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted.Add(1) > 1 {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				for i := 0; ; i++ {
					body, err := ReadFrame(c, DefaultMaxFrame)
					if err != nil {
						return
					}
					var req ping
					if Decode(body, &req) != nil {
						return
					}
					out, _ := Encode(echo(req))
					if i == 1 {
						c.Write([]byte{0, 0}) // half a header, then close
						return
					}
					WriteFrame(c, out, DefaultMaxFrame)
				}
			}()
		}
	}()
	addr := ln.Addr().String()
	var p Pool
	defer p.Close()
	_, err = callPooled(t, &p, addr, 1)
	require.NoError(t, err)
	_, err = callPooled(t, &p, addr, 2)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.NotErrorIs(t, err, errClosedBeforeReply)
	assert.Equal(t, int64(1), accepted.Load(), "no second connection")
	ln.Close()
	<-done
}
