package sidechannel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// ServerOptions configure a Server. Zero fields take the defaults.
type ServerOptions struct {
	// MaxFrame bounds request frames (default DefaultMaxRequestFrame:
	// clients send only small requests). Replies are not bounded by it.
	MaxFrame int
	// MaxConns bounds the connections served at once (default
	// DefaultMaxConns). A connection over the limit is closed as soon as it
	// is accepted, and counted (RefusedConns, OnConnRefused).
	MaxConns int
	// IdleTimeout closes a connection that sends no request for this long
	// (default DefaultServerIdleTimeout): the deadline for a frame's header
	// to arrive. Clients that keep connections (Pool) must give them up
	// sooner: their IdleTimeout must be shorter than this.
	IdleTimeout time.Duration
	// FrameTimeout is the deadline for the rest of a frame once its header
	// has arrived (default 5s), so a peer cannot hold a connection open by
	// trickling a frame.
	FrameTimeout time.Duration
	// WriteTimeout bounds writing one reply (default 5s).
	WriteTimeout time.Duration
	// OnMalformed is called, once per bad frame, before its connection is
	// closed: the place to count it.
	OnMalformed func(err error)
	// OnConnRefused is called, from the accepting goroutine, for every
	// connection closed because MaxConns were already being served: the
	// place to count it.
	OnConnRefused func(remote net.Addr)
	// Logger receives debug lines about closed connections (default no-op).
	Logger *zap.Logger

	// testHookConn, when set by a test, wraps every served connection.
	testHookConn func(net.Conn) net.Conn
}

func (o *ServerOptions) fill() {
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxRequestFrame
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultServerIdleTimeout
	}
	if o.FrameTimeout <= 0 {
		o.FrameTimeout = 5 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
}

// DefaultServerIdleTimeout is how long a Server waits for the next request
// on a connection by default. A Pool's default idle timeout,
// DefaultPoolIdleTimeout, is half of it, so a kept connection is given up by
// the client well before the server closes it.
const DefaultServerIdleTimeout = 30 * time.Second

// DefaultMaxConns is the default bound on the connections a Server serves
// at once. Each connection is one client handshaking with the engine (one
// per remote engine at a time, as the handshake client runs one fetch per
// engine), so 64 covers large deployments while bounding the goroutines and
// buffers that idle or hostile connections can hold.
const DefaultMaxConns = 64

// Server answers requests of type Req with replies of type Resp, one
// goroutine per connection, any number of requests per connection.
type Server[Req, Resp any] struct {
	ln      net.Listener
	handle  func(Req) Resp
	opts    ServerOptions
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	closeMu sync.Once
	refused atomic.Uint64
	warned  atomic.Bool // a peer speaking HTTP was logged at warn level
}

// Listen starts a server on addr ("127.0.0.1:0" picks a free port). handle
// runs on the connection's goroutine and must return promptly.
func Listen[Req, Resp any](addr string, handle func(Req) Resp, opts ServerOptions) (*Server[Req, Resp], error) {
	opts.fill()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sidechannel: listen on %s: %w", addr, err)
	}
	s := &Server[Req, Resp]{ln: ln, handle: handle, opts: opts, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server[Req, Resp]) Addr() *net.TCPAddr { return s.ln.Addr().(*net.TCPAddr) }

// RefusedConns returns how many connections were closed on arrival because
// MaxConns connections were already being served.
func (s *Server[Req, Resp]) RefusedConns() uint64 { return s.refused.Load() }

// Close stops accepting, closes every connection and waits for the
// server's goroutines. It is idempotent.
func (s *Server[Req, Resp]) Close() error {
	var err error
	s.closeMu.Do(func() {
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		err = s.ln.Close()
	})
	s.wg.Wait()
	return err
}

func (s *Server[Req, Resp]) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. too many open files): back off briefly.
			s.opts.Logger.Debug("side channel accept failed", zap.Error(err))
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if len(s.conns) >= s.opts.MaxConns {
			s.mu.Unlock()
			s.refused.Add(1)
			s.opts.Logger.Debug("side channel: too many connections, closing a new one",
				zap.Stringer("peer", c.RemoteAddr()), zap.Int("max_conns", s.opts.MaxConns))
			if s.opts.OnConnRefused != nil {
				s.opts.OnConnRefused(c.RemoteAddr())
			}
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *Server[Req, Resp]) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var rc net.Conn = c
	if s.opts.testHookConn != nil {
		rc = s.opts.testHookConn(c)
	}
	for {
		body, err := s.readRequest(rc)
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			case errors.Is(err, ErrSpeaksHTTP):
				s.spokeHTTP(c, err)
			case errors.Is(err, ErrFrameTooLarge), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, errFrameTimeout):
				s.malformed(c, err)
			default:
				s.opts.Logger.Debug("side channel read failed", zap.Stringer("peer", c.RemoteAddr()), zap.Error(err))
			}
			return
		}
		var req Req
		if err := Decode(body, &req); err != nil {
			s.malformed(c, err)
			return
		}
		out, err := Encode(s.handle(req))
		if err != nil {
			s.opts.Logger.Warn("side channel reply does not encode", zap.Error(err))
			return
		}
		if err := c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout)); err != nil {
			return
		}
		if err := WriteFrame(c, out, max(s.opts.MaxFrame, len(out))); err != nil {
			s.opts.Logger.Debug("side channel write failed", zap.Error(err))
			return
		}
	}
}

// readRequest reads one request frame: its header within IdleTimeout, the
// rest within FrameTimeout.
func (s *Server[Req, Resp]) readRequest(c net.Conn) ([]byte, error) {
	if err := c.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout)); err != nil {
		return nil, err
	}
	n, err := readHeader(c, s.opts.MaxFrame)
	if err != nil {
		return nil, err
	}
	if err := c.SetReadDeadline(time.Now().Add(s.opts.FrameTimeout)); err != nil {
		return nil, err
	}
	body, err := readBody(c, n)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: %w", errFrameTimeout, err)
	}
	return body, err
}

// errFrameTimeout marks a frame whose body did not arrive within
// FrameTimeout of its header.
var errFrameTimeout = errors.New("sidechannel: frame not received whole within the frame timeout")

// spokeHTTP reports a peer that sent HTTP to the side channel: counted as a
// malformed frame, logged at warn level the first time (a misconfigured
// client is worth an operator's attention; a flood of them is not worth a
// flood of lines) and at debug level after.
func (s *Server[Req, Resp]) spokeHTTP(c net.Conn, err error) {
	msg := "side channel: a peer speaks HTTP to the side-channel port: was it given this port as the engine's API port? Closing the connection"
	if s.warned.CompareAndSwap(false, true) {
		s.opts.Logger.Warn(msg, zap.Stringer("peer", c.RemoteAddr()), zap.Error(err))
	} else {
		s.opts.Logger.Debug(msg, zap.Stringer("peer", c.RemoteAddr()), zap.Error(err))
	}
	if s.opts.OnMalformed != nil {
		s.opts.OnMalformed(err)
	}
}

func (s *Server[Req, Resp]) malformed(c net.Conn, err error) {
	s.opts.Logger.Debug("side channel: malformed frame, closing connection", zap.Stringer("peer", c.RemoteAddr()), zap.Error(err))
	if s.opts.OnMalformed != nil {
		s.opts.OnMalformed(err)
	}
}
