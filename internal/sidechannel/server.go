package sidechannel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ServerOptions configure a Server. Zero fields take the defaults.
type ServerOptions struct {
	// MaxFrame bounds request frames (default DefaultMaxFrame).
	MaxFrame int
	// IdleTimeout closes a connection that sends no request for this long
	// (default 30s); it is also the deadline for reading one whole frame.
	IdleTimeout time.Duration
	// WriteTimeout bounds writing one reply (default 5s).
	WriteTimeout time.Duration
	// OnMalformed is called, once per bad frame, before its connection is
	// closed: the place to count it.
	OnMalformed func(err error)
	// Logger receives debug lines about closed connections (default no-op).
	Logger *zap.Logger
}

func (o *ServerOptions) fill() {
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 30 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
}

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
	for {
		if err := c.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout)); err != nil {
			return
		}
		body, err := ReadFrame(c, s.opts.MaxFrame)
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			case errors.Is(err, ErrFrameTooLarge), errors.Is(err, io.ErrUnexpectedEOF):
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

func (s *Server[Req, Resp]) malformed(c net.Conn, err error) {
	s.opts.Logger.Debug("side channel: malformed frame, closing connection", zap.Stringer("peer", c.RemoteAddr()), zap.Error(err))
	if s.opts.OnMalformed != nil {
		s.opts.OnMalformed(err)
	}
}
