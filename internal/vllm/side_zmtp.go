package vllm

// The side channel speaks ZMTP 3 through github.com/go-zeromq/zmq4, pure Go.
// zmq4 v0.17.0 interoperates with libzmq for REQ and ROUTER, but it trusts
// its peers: a READY command with a truncated property panics in its
// accept goroutine (slice bounds out of range in Metadata.UnmarshalZMTP), a
// frame header announcing 2^63-1 bytes panics a connection's reader
// (makeslice: len out of range), both killing the process; its accept loop
// runs each ZMTP handshake inline without a deadline, so one TCP connection
// that sends nothing stalls every later peer; and a socket's reader
// goroutines block forever on its 10-message queue once nobody reads it.
//
// So zmq4 never reads the network itself here. It runs over a transport
// registered under sideScheme whose connections (sideConn):
//
//   - do the ZMTP greeting and READY exchange before zmq4 sees the
//     connection (zmtpPrelude), under a deadline, in a goroutine of their
//     own on the listening side, validating every length; then replay to
//     zmq4 a canonical greeting and a READY it cannot choke on (the peer's
//     socket type; on the listening side an identity this package assigns,
//     so routing identities are unique and name a peer whose address is
//     known), and discard zmq4's own greeting and READY;
//   - check every later frame header before zmq4 reads the length
//     (zmtpGuard): a frame over the limit, too many frames in one message or
//     a malformed header closes the connection;
//   - on the listening side, hand zmq4 at most sideQueueTokens complete
//     messages at a time (fewer than its queue holds), so its readers never
//     block on the queue and all exit when the connections close;
//   - bound idle reads and each write with deadlines.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

const (
	// sideScheme names the guarded TCP transport in zmq4's endpoint strings.
	sideScheme = "gonixl-vllm-tcp"

	zmtpGreetingLen  = 64
	zmtpFlagMore     = 0x01
	zmtpFlagLong     = 0x02
	zmtpFlagCommand  = 0x04
	zmtpFlagReserved = 0xf8

	// zmtpMaxFrames bounds the frames of one message (a REQ sends 2, a
	// ROUTER's reply to a REQ has 3).
	zmtpMaxFrames = 8
	// zmtpMaxReady bounds the peer's READY command (libzmq's is < 100 bytes).
	zmtpMaxReady = 4 << 10
	// sideQueueTokens bounds the messages handed to zmq4 but not yet taken
	// by the server's loop; zmq4's ROUTER queue holds 10.
	sideQueueTokens = 8
)

// errSideTooLarge is a frame over the connection's limit.
type errSideTooLarge struct{ size, limit uint64 }

func (e errSideTooLarge) Error() string {
	return fmt.Sprintf("frame of %d bytes exceeds the %d-byte limit (oversize)", e.size, e.limit)
}

// sideGreeting is the ZMTP 3.0 greeting for the NULL mechanism, as zmq4
// writes it and expects to read: signature ff, 8 bytes padding, 7f; version
// 3.0; mechanism "NULL"; as-server 0; filler.
var sideGreeting = func() (g [zmtpGreetingLen]byte) {
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:32], "NULL")
	return g
}()

// zmtpPrelude writes the greeting and a READY command for socket type self
// on c, and reads the peer's greeting and READY command, checking each
// length against what arrived. It returns the peer's Socket-Type if accept
// allows it. The caller sets c's deadline.
//
// NULL is symmetric: each side sends its READY without waiting for the
// other's (libzmq does). So this sends its own READY up front rather than
// leave it to zmq4, which writes its READY only once this returns: two of
// these preludes facing each other would otherwise each wait for the other.
func zmtpPrelude(c net.Conn, self string, accept func(socketType string) bool) (string, error) {
	if _, err := c.Write(append(sideGreeting[:len(sideGreeting):len(sideGreeting)], zmtpReadyFrame(self, "")...)); err != nil {
		return "", fmt.Errorf("send greeting: %w", err)
	}
	var g [zmtpGreetingLen]byte
	if _, err := io.ReadFull(c, g[:]); err != nil {
		return "", fmt.Errorf("read greeting: %w", err)
	}
	if g[0] != 0xff || g[9]&0x01 == 0 {
		return "", errors.New("not a ZMTP 3 greeting")
	}
	if g[10] < 3 {
		return "", fmt.Errorf("ZMTP version %d.%d, want 3.x", g[10], g[11])
	}
	if mech := strings.TrimRight(string(g[12:32]), "\x00"); mech != "NULL" {
		return "", fmt.Errorf("security mechanism %q, want NULL", mech)
	}
	var hdr [9]byte
	if _, err := io.ReadFull(c, hdr[:2]); err != nil {
		return "", fmt.Errorf("read READY: %w", err)
	}
	if hdr[0]&^zmtpFlagLong != zmtpFlagCommand {
		return "", fmt.Errorf("frame flags %#02x where a READY command was due", hdr[0])
	}
	size := uint64(hdr[1])
	if hdr[0]&zmtpFlagLong != 0 {
		if _, err := io.ReadFull(c, hdr[2:]); err != nil {
			return "", fmt.Errorf("read READY: %w", err)
		}
		size = binary.BigEndian.Uint64(hdr[1:])
	}
	if size > zmtpMaxReady {
		return "", fmt.Errorf("READY command: %w", errSideTooLarge{size, zmtpMaxReady})
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		return "", fmt.Errorf("read READY: %w", err)
	}
	st, err := zmtpParseReady(body)
	if err != nil {
		return "", err
	}
	if !accept(st) {
		return "", fmt.Errorf("peer socket type %q does not pair with this one", st)
	}
	return st, nil
}

// zmtpParseReady returns the Socket-Type property of a READY command body.
func zmtpParseReady(body []byte) (string, error) {
	if len(body) == 0 || 1+int(body[0]) > len(body) {
		return "", errors.New("malformed command")
	}
	name, p := string(body[1:1+int(body[0])]), body[1+int(body[0]):]
	if name == "ERROR" && len(p) > 0 && 1+int(p[0]) <= len(p) {
		return "", fmt.Errorf("peer sent ERROR %q", p[1:1+int(p[0])])
	}
	if name != "READY" {
		return "", fmt.Errorf("command %q where READY was due", name)
	}
	st, seen := "", false
	for len(p) > 0 {
		kl := int(p[0])
		if kl == 0 || 1+kl+4 > len(p) {
			return "", errors.New("READY: malformed property")
		}
		key := string(p[1 : 1+kl])
		vl := binary.BigEndian.Uint32(p[1+kl:])
		p = p[1+kl+4:]
		if uint64(vl) > uint64(len(p)) {
			return "", errors.New("READY: property value past the command's end")
		}
		val := string(p[:vl])
		p = p[vl:]
		if strings.EqualFold(key, "Socket-Type") {
			if seen {
				return "", errors.New("READY: two Socket-Type properties")
			}
			st, seen = val, true
		}
	}
	if !seen {
		return "", errors.New("READY: no Socket-Type property")
	}
	return st, nil
}

// zmtpReplay is what zmq4 reads first on a connection whose prelude is done:
// the canonical greeting and a READY with the peer's socket type and, when
// id is not empty, that routing identity.
func zmtpReplay(socketType, id string) []byte {
	return append(sideGreeting[:len(sideGreeting):len(sideGreeting)], zmtpReadyFrame(socketType, id)...)
}

// zmtpReadyFrame is a READY command frame with a Socket-Type property and,
// when id is not empty, an Identity.
func zmtpReadyFrame(socketType, id string) []byte {
	body := []byte{5}
	body = append(body, "READY"...)
	prop := func(k, v string) {
		body = append(body, byte(len(k)))
		body = append(body, k...)
		body = binary.BigEndian.AppendUint32(body, uint32(len(v)))
		body = append(body, v...)
	}
	prop("Socket-Type", socketType)
	if id != "" {
		prop("Identity", id)
	}
	var out []byte
	if len(body) > 255 {
		out = append(out, zmtpFlagCommand|zmtpFlagLong)
		out = binary.BigEndian.AppendUint64(out, uint64(len(body)))
	} else {
		out = append(out, zmtpFlagCommand, byte(len(body)))
	}
	return append(out, body...)
}

// zmtpGuard follows the frames of a ZMTP 3 byte stream after the handshake.
type zmtpGuard struct {
	maxFrame uint64
	state    int // 0: flags due, 1: length bytes, 2: body
	flags    byte
	lenBytes int
	size     uint64
	remain   uint64
	frames   int // frames seen of the current message
}

// scan checks b, the next bytes of the stream. It returns how many bytes of
// b lead up to and include the end of the first message that ends in b
// (end true), or len(b); or an error at the first bad frame header, before
// the header's last byte is passed on.
func (g *zmtpGuard) scan(b []byte) (n int, end bool, err error) {
	for i := 0; i < len(b); {
		switch g.state {
		case 0:
			f := b[i]
			i++
			switch {
			case f&zmtpFlagReserved != 0:
				return 0, false, fmt.Errorf("frame flags %#02x have reserved bits set", f)
			case f&zmtpFlagCommand != 0 && (f&zmtpFlagMore != 0 || g.frames > 0):
				return 0, false, errors.New("command frame inside a multi-frame message")
			}
			g.frames++
			if g.frames > zmtpMaxFrames {
				return 0, false, fmt.Errorf("more than %d frames in one message", zmtpMaxFrames)
			}
			g.flags, g.size, g.lenBytes, g.state = f, 0, 1, 1
			if f&zmtpFlagLong != 0 {
				g.lenBytes = 8
			}
		case 1:
			g.size = g.size<<8 | uint64(b[i])
			i++
			if g.lenBytes--; g.lenBytes > 0 {
				continue
			}
			if g.size > g.maxFrame {
				return 0, false, errSideTooLarge{g.size, g.maxFrame}
			}
			g.remain, g.state = g.size, 2
			if g.remain == 0 && g.frameDone() {
				return i, true, nil
			}
		case 2:
			k := uint64(len(b) - i)
			if k > g.remain {
				k = g.remain
			}
			i += int(k)
			g.remain -= k
			if g.remain == 0 && g.frameDone() {
				return i, true, nil
			}
		}
	}
	return len(b), false, nil
}

// frameDone ends the current frame and reports whether it ended a message.
func (g *zmtpGuard) frameDone() bool {
	g.state = 0
	if g.flags&zmtpFlagMore != 0 {
		return false
	}
	g.frames = 0
	return true
}

// sideConn is a guarded connection handed to zmq4 after its prelude.
type sideConn struct {
	raw     net.Conn
	replay  []byte // what zmq4 reads first (zmtpReplay)
	swallow int    // bytes of zmq4's own greeting still to discard
	// zmq4's own READY, discarded too (the prelude sent one): skip follows
	// its frame until skipped.
	skip    zmtpGuard
	skipped bool
	guard   zmtpGuard
	pending []byte // read from raw, checked, not yet handed to zmq4

	idle, write time.Duration   // 0: no deadline set by the connection
	tokens      chan struct{}   // listening side: sideQueueTokens
	stop        <-chan struct{} // listening side: the server closing
	onGuard     func(error)     // a frame the guard refused

	closeOnce sync.Once
	closed    chan struct{}
	onClose   func()
}

func newSideConn(raw net.Conn, replay []byte, maxFrame uint64) *sideConn {
	return &sideConn{
		raw:     raw,
		replay:  replay,
		swallow: zmtpGreetingLen,
		skip:    zmtpGuard{maxFrame: zmtpMaxReady},
		guard:   zmtpGuard{maxFrame: maxFrame},
		closed:  make(chan struct{}),
	}
}

func (c *sideConn) Read(p []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		return n, nil
	}
	if len(p) == 0 {
		return 0, nil
	}
	var src []byte
	if len(c.pending) > 0 {
		src = c.pending
		if len(src) > len(p) {
			src = src[:len(p)]
		}
	} else {
		if c.idle > 0 {
			_ = c.raw.SetReadDeadline(time.Now().Add(c.idle))
		}
		n, err := c.raw.Read(p)
		if n == 0 {
			if err == nil {
				return 0, nil
			}
			_ = c.Close()
			return 0, err
		}
		src = p[:n]
	}
	n, end, err := c.guard.scan(src)
	if err != nil {
		if c.onGuard != nil {
			c.onGuard(err)
		}
		_ = c.Close()
		return 0, err
	}
	if end && c.tokens != nil {
		select {
		case <-c.tokens:
		case <-c.closed:
			return 0, net.ErrClosed
		case <-c.stop:
			_ = c.Close()
			return 0, net.ErrClosed
		}
	}
	if len(c.pending) > 0 {
		copy(p, c.pending[:n])
		c.pending = c.pending[n:]
	} else if n < len(src) {
		c.pending = append([]byte(nil), src[n:]...)
	}
	return n, nil
}

func (c *sideConn) Write(p []byte) (int, error) {
	total := len(p)
	if c.swallow > 0 {
		k := min(c.swallow, len(p))
		c.swallow -= k
		p = p[k:]
	}
	if !c.skipped && len(p) > 0 {
		n, end, err := c.skip.scan(p)
		if err != nil {
			_ = c.Close()
			return 0, fmt.Errorf("zmq4's READY: %w", err)
		}
		c.skipped = end
		p = p[n:]
	}
	if len(p) == 0 {
		return total, nil
	}
	if c.write > 0 {
		_ = c.raw.SetWriteDeadline(time.Now().Add(c.write))
	}
	n, err := c.raw.Write(p)
	if err != nil {
		_ = c.Close()
	}
	return total - len(p) + n, err
}

func (c *sideConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.raw.Close()
		if c.onClose != nil {
			c.onClose()
		}
	})
	return nil
}

func (c *sideConn) LocalAddr() net.Addr                { return c.raw.LocalAddr() }
func (c *sideConn) RemoteAddr() net.Addr               { return c.raw.RemoteAddr() }
func (c *sideConn) SetDeadline(t time.Time) error      { return c.raw.SetDeadline(t) }
func (c *sideConn) SetReadDeadline(t time.Time) error  { return c.raw.SetReadDeadline(t) }
func (c *sideConn) SetWriteDeadline(t time.Time) error { return c.raw.SetWriteDeadline(t) }

// sideCtxKey carries a *SideServer (listening) or a *sideDial (dialing)
// from a zmq4 socket's context to sideTransport.
type sideCtxKey struct{}

// sideTransport is zmq4's transport for sideScheme endpoints.
type sideTransport struct{}

var (
	sideRegisterOnce sync.Once
	sideRegisterErr  error
)

func sideRegister() error {
	sideRegisterOnce.Do(func() { sideRegisterErr = zmq4.RegisterTransport(sideScheme, sideTransport{}) })
	return sideRegisterErr
}

func (sideTransport) Addr(ep string) (string, error) {
	if _, _, err := net.SplitHostPort(ep); err != nil {
		return "", err
	}
	return ep, nil
}

func (sideTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	s, ok := ctx.Value(sideCtxKey{}).(*SideServer)
	if !ok {
		return nil, errors.New("the " + sideScheme + " transport listens only for a SideServer")
	}
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &sideListener{raw: raw, srv: s, ready: make(chan *sideConn), done: make(chan struct{}), conns: map[net.Conn]struct{}{}, ids: map[string]*sideConn{}}
	s.ln = l
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (sideTransport) Dial(ctx context.Context, _ transport.Dialer, addr string) (net.Conn, error) {
	d, ok := ctx.Value(sideCtxKey{}).(*sideDial)
	if !ok {
		return nil, errors.New("the " + sideScheme + " transport dials only for FetchRanks")
	}
	return d.dial(ctx, addr)
}

// sideListener accepts TCP connections, runs each prelude in a goroutine of
// its own and hands zmq4's accept loop only connections that passed it.
type sideListener struct {
	raw   net.Listener
	srv   *SideServer
	ready chan *sideConn
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // every open connection: raw ones in their prelude, then *sideConn
	ids   map[string]*sideConn  // by the routing identity this package gave it
	seq   uint64
}

func (l *sideListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *sideListener) Addr() net.Addr { return l.raw.Addr() }

func (l *sideListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		_ = l.raw.Close()
		l.mu.Lock()
		open := make([]net.Conn, 0, len(l.conns))
		for c := range l.conns {
			open = append(open, c)
		}
		l.mu.Unlock()
		for _, c := range open {
			_ = c.Close()
		}
		l.wg.Wait()
	})
	return nil
}

func (l *sideListener) acceptLoop() {
	defer l.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		raw, err := l.raw.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: wait instead of spinning.
			t := time.NewTimer(backoff)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		l.mu.Lock()
		full := len(l.conns) >= l.srv.opts.MaxPeers
		closing := l.isDone()
		if !full && !closing {
			l.conns[raw] = struct{}{}
		}
		l.mu.Unlock()
		if full || closing {
			_ = raw.Close()
			if full {
				l.srv.drop(fmt.Errorf("%w: %s: refused a connection from %s: %d peers connected already (MaxPeers)", ErrSide, l.srv.where(), raw.RemoteAddr(), l.srv.opts.MaxPeers))
			}
			continue
		}
		l.wg.Add(1)
		go l.prelude(raw)
	}
}

func (l *sideListener) isDone() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *sideListener) prelude(raw net.Conn) {
	defer l.wg.Done()
	s := l.srv
	_ = raw.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	st, err := zmtpPrelude(raw, "ROUTER", func(st string) bool { return st == "REQ" || st == "DEALER" })
	if err == nil {
		err = raw.SetDeadline(time.Time{})
	}
	if err != nil {
		l.forget(raw)
		_ = raw.Close()
		if !l.isDone() {
			s.drop(fmt.Errorf("%w: %s: ZMTP handshake with %s: %w", ErrSide, s.where(), raw.RemoteAddr(), err))
		}
		return
	}
	l.mu.Lock()
	l.seq++
	id := fmt.Sprintf("gonixl-peer-%d", l.seq)
	c := newSideConn(raw, zmtpReplay(st, id), uint64(s.opts.MaxRequest))
	c.idle, c.write = s.opts.IdleTimeout, s.opts.WriteTimeout
	c.tokens, c.stop = s.tokens, s.done
	peer := raw.RemoteAddr()
	c.onGuard = func(err error) {
		s.drop(fmt.Errorf("%w: %s: closed the connection from %s: %w", ErrSide, s.where(), peer, err))
	}
	c.onClose = func() {
		l.mu.Lock()
		delete(l.conns, c)
		delete(l.ids, id)
		l.mu.Unlock()
	}
	delete(l.conns, raw)
	closing := l.isDone()
	if !closing {
		l.conns[c] = struct{}{}
		l.ids[id] = c
	}
	l.mu.Unlock()
	if closing {
		_ = raw.Close()
		return
	}
	select {
	case l.ready <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *sideListener) forget(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// peer names the connection a routing identity belongs to.
func (l *sideListener) peer(id []byte) string {
	l.mu.Lock()
	c := l.ids[string(id)]
	l.mu.Unlock()
	if c == nil {
		return fmt.Sprintf("peer %q (gone)", id)
	}
	return c.RemoteAddr().String()
}

func (l *sideListener) peers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// sideDial is one FetchRanks call's connection: the transport dials through
// it, and the call moves its deadline and aborts it.
type sideDial struct {
	maxFrame uint64
	deadline time.Time

	mu       sync.Mutex
	raw      net.Conn
	aborted  bool
	err      error // why dial failed, as the caller reports it
	timedOut bool  // and whether it was the deadline
}

// dial connects, retrying every 100 ms (libzmq's reconnect interval) until
// the deadline, then runs the prelude.
func (d *sideDial) dial(ctx context.Context, addr string) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(ctx, d.deadline)
	defer cancel()
	var nd net.Dialer
	var raw net.Conn
	for {
		var err error
		raw, err = nd.DialContext(ctx, "tcp", addr)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, d.fail("connect", err, ctx.Err() == context.DeadlineExceeded)
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, d.fail("connect", err, ctx.Err() == context.DeadlineExceeded)
		case <-t.C:
		}
	}
	d.mu.Lock()
	if d.aborted {
		d.mu.Unlock()
		_ = raw.Close()
		return nil, d.fail("connect", net.ErrClosed, false)
	}
	d.raw = raw
	d.mu.Unlock()
	_ = raw.SetDeadline(d.deadline)
	st, err := zmtpPrelude(raw, "REQ", func(st string) bool { return st == "ROUTER" || st == "REP" })
	if err != nil {
		_ = raw.Close()
		return nil, d.fail("ZMTP handshake", err, errors.Is(err, os.ErrDeadlineExceeded))
	}
	return newSideConn(raw, zmtpReplay(st, ""), d.maxFrame), nil
}

func (d *sideDial) fail(what string, err error, timedOut bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil {
		d.err = fmt.Errorf("%s: %w", what, err)
		d.timedOut = timedOut
	}
	return d.err
}

func (d *sideDial) setDeadline(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deadline = t
	if d.raw != nil {
		_ = d.raw.SetDeadline(t)
	}
}

// abort closes the connection, now and if dial is still to make it.
func (d *sideDial) abort() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.aborted = true
	if d.raw != nil {
		_ = d.raw.Close()
	}
}
