package sidechannel

import (
	"context"
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
type Pool struct {
	mu     sync.Mutex
	idle   map[string][]net.Conn
	closed bool
}

// maxIdlePerAddr bounds the connections a Pool keeps per server: calls in
// flight at once beyond it dial and close as Call does.
const maxIdlePerAddr = 4

// CallPooled is Call over a connection p keeps for addr. A kept connection
// the server closed meanwhile (its idle timeout) fails the first write or
// read; the call is then made once more on a new connection. The request
// may so reach the server twice: callers send only requests that are safe
// to repeat.
func CallPooled[Req, Resp any](ctx context.Context, p *Pool, addr string, req Req, maxFrame int, fallback time.Duration) (Resp, error) {
	var zero Resp
	ctx, cancel, body, maxFrame, err := prepare(ctx, req, maxFrame, fallback)
	defer cancel()
	if err != nil {
		return zero, err
	}
	for attempt := 0; ; attempt++ {
		c, reused := p.get(addr)
		if c == nil {
			var d net.Dialer
			if c, err = d.DialContext(ctx, "tcp", addr); err != nil {
				return zero, fmt.Errorf("sidechannel: dial %s: %w", addr, err)
			}
		}
		reply, err := exchange(ctx, c, addr, body, maxFrame)
		if err != nil {
			c.Close()
			if reused && attempt == 0 && ctx.Err() == nil {
				continue
			}
			return zero, err
		}
		p.put(addr, c)
		return decodeReply[Resp](reply, addr)
	}
}

// exchange writes one frame and reads one, within ctx.
func exchange(ctx context.Context, c net.Conn, addr string, body []byte, maxFrame int) ([]byte, error) {
	deadline, _ := ctx.Deadline()
	if err := c.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("sidechannel: %s: %w", addr, err)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := WriteFrame(c, body, maxFrame); err != nil {
		return nil, fmt.Errorf("sidechannel: send to %s: %w", addr, ctxErr(ctx, closedHint(err)))
	}
	reply, err := ReadFrame(c, maxFrame)
	if err != nil {
		return nil, fmt.Errorf("sidechannel: reply from %s: %w", addr, ctxErr(ctx, closedHint(err)))
	}
	return reply, nil
}

func (p *Pool) get(addr string) (net.Conn, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[addr]
	if len(cs) == 0 {
		return nil, false
	}
	c := cs[len(cs)-1]
	p.idle[addr] = cs[:len(cs)-1]
	return c, true
}

func (p *Pool) put(addr string, c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[addr]) >= maxIdlePerAddr {
		c.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]net.Conn{}
	}
	_ = c.SetDeadline(time.Time{})
	p.idle[addr] = append(p.idle[addr], c)
}

// Close closes the kept connections; later calls dial and close as Call
// does. It is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cs := range p.idle {
		for _, c := range cs {
			c.Close()
		}
	}
	p.idle = nil
}
