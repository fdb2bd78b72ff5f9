package sidechannel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Pool keeps idle connections to servers for calls on the critical path
// (pull's confirmations): a call on a kept connection costs one round
// trip, not a TCP handshake as well. A Server serves any number of frames
// on one connection, until its IdleTimeout. The zero value is ready; Close
// closes what it keeps.
//
// As net/http's Transport, a Pool never reuses a connection that sat idle
// longer than its IdleTimeout, which must be shorter than the server's
// (DefaultPoolIdleTimeout is half of DefaultServerIdleTimeout): the client
// then gives a connection up before the server closes it, and a request
// never races the server's close. A server configured with a shorter idle
// timeout than its clients', or one that restarted, still closes kept
// connections under them: a call whose kept connection was closed before
// any byte of the reply arrived is made once more, on a new connection.
type Pool struct {
	// IdleTimeout is how long a connection may sit idle in the pool and
	// still be reused (default DefaultPoolIdleTimeout). Keep it below the
	// servers' ServerOptions.IdleTimeout.
	IdleTimeout time.Duration

	mu     sync.Mutex
	idle   map[string][]idleConn
	closed bool

	// now reads the monotonic clock that times idleness (default
	// time.Now); tests set it.
	now func() time.Time
}

// idleConn is a kept connection and when it was kept.
type idleConn struct {
	c     net.Conn
	since time.Time
}

// DefaultPoolIdleTimeout is how long a Pool keeps a connection idle by
// default: half of DefaultServerIdleTimeout, so that the client drops a
// connection well before the server closes it (a reply's last bytes and
// the client's put happen a moment after the server restarts its idle
// timer, and a busy machine may stretch that moment).
const DefaultPoolIdleTimeout = DefaultServerIdleTimeout / 2

// maxIdlePerAddr bounds the connections a Pool keeps per server: calls in
// flight at once beyond it dial and close as Call does.
const maxIdlePerAddr = 4

// CallPooled is Call over a connection p keeps for addr. A kept connection
// that the server closed before replying (it restarted, or its idle
// timeout is shorter than p's) fails the call with end of stream or a
// reset before the first byte of the reply; the call is then made once
// more, on a new connection, never on another kept one (which the server
// likely closed too). The request may so reach the server twice: callers
// send only requests that are safe to repeat.
func CallPooled[Req, Resp any](ctx context.Context, p *Pool, addr string, req Req, maxFrame int, fallback time.Duration) (Resp, error) {
	var zero Resp
	ctx, cancel, body, maxFrame, err := prepare(ctx, req, maxFrame, fallback)
	defer cancel()
	if err != nil {
		return zero, err
	}
	c, keptSince, reused := p.get(addr)
	for {
		if c == nil {
			var d net.Dialer
			if c, err = d.DialContext(ctx, "tcp", addr); err != nil {
				return zero, fmt.Errorf("sidechannel: dial %s: %w", addr, err)
			}
		}
		reply, err := exchange(ctx, c, addr, body, maxFrame)
		if err != nil {
			c.Close()
			if reused && ctx.Err() == nil && errors.Is(err, errClosedBeforeReply) {
				// Those kept before it idled longer: closed too, likely.
				p.dropKeptBy(addr, keptSince)
				c, reused = nil, false // once more, on a new connection
				continue
			}
			return zero, err
		}
		p.put(addr, c)
		return decodeReply[Resp](reply, addr)
	}
}

func (p *Pool) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

func (p *Pool) idleTimeout() time.Duration {
	if p.IdleTimeout > 0 {
		return p.IdleTimeout
	}
	return DefaultPoolIdleTimeout
}

// get returns a kept connection to addr that has been idle for less than
// the idle timeout, the most recently kept first, and when it was kept; it
// closes those idle for longer.
func (p *Pool) get(addr string) (net.Conn, time.Time, bool) {
	now := p.clock()
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.dropStale(addr, now)
	if len(cs) == 0 {
		return nil, time.Time{}, false
	}
	ic := cs[len(cs)-1]
	p.idle[addr] = cs[:len(cs)-1]
	return ic.c, ic.since, true
}

func (p *Pool) put(addr string, c net.Conn) {
	now := p.clock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.dropStale(addr, now)) >= maxIdlePerAddr {
		c.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]idleConn{}
	}
	_ = c.SetDeadline(time.Time{})
	p.idle[addr] = append(p.idle[addr], idleConn{c: c, since: now})
}

// dropKeptBy closes addr's kept connections kept at or before since.
func (p *Pool) dropKeptBy(addr string, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop(addr, func(ic idleConn) bool { return !ic.since.After(since) })
}

// dropStale closes addr's kept connections idle for the idle timeout or
// longer and returns those left. The caller holds p.mu.
func (p *Pool) dropStale(addr string, now time.Time) []idleConn {
	timeout := p.idleTimeout()
	return p.drop(addr, func(ic idleConn) bool { return now.Sub(ic.since) >= timeout })
}

// drop closes addr's kept connections for which gone is true and returns
// those left. The caller holds p.mu.
func (p *Pool) drop(addr string, gone func(idleConn) bool) []idleConn {
	cs := p.idle[addr]
	fresh := cs[:0]
	for _, ic := range cs {
		if gone(ic) {
			ic.c.Close()
			continue
		}
		fresh = append(fresh, ic)
	}
	clear(cs[len(fresh):])
	if len(fresh) == 0 {
		delete(p.idle, addr)
		return nil
	}
	p.idle[addr] = fresh
	return fresh
}

// Close closes the kept connections; later calls dial and close as Call
// does. It is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cs := range p.idle {
		for _, ic := range cs {
			ic.c.Close()
		}
	}
	p.idle = nil
}
