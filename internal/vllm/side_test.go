package vllm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

func TestSidePort(t *testing.T) {
	assert.Equal(t, 5600, SidePort(DefaultSidePort, 0))
	assert.Equal(t, 5603, SidePort(DefaultSidePort, 3))
	assert.Equal(t, 7001, SidePort(7000, 1))
	assert.Equal(t, "localhost", DefaultSideHost)
	assert.Equal(t, 5*time.Second, DefaultSideTimeout)
}

// sideTestServer listens on 127.0.0.1:0 with a fixed clock and records
// what it drops.
type sideTestServer struct {
	*SideServer
	mu      sync.Mutex
	dropped []error
}

func (s *sideTestServer) drops() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.dropped))
	for i, e := range s.dropped {
		out[i] = e.Error()
	}
	return out
}

func startSide(t *testing.T, opts SideOptions) *sideTestServer {
	t.Helper()
	ts := &sideTestServer{}
	if opts.Now == nil {
		opts.Now = func() float64 { return 12345.5 }
	}
	opts.OnMalformed = func(err error) {
		require.ErrorIs(t, err, ErrSide)
		ts.mu.Lock()
		ts.dropped = append(ts.dropped, err)
		ts.mu.Unlock()
	}
	s, err := ListenSide("127.0.0.1", 0, opts)
	require.NoError(t, err)
	ts.SideServer = s
	t.Cleanup(func() { _ = s.Close() })
	return ts
}

func payloadFor(pp, tp, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(pp), uint64(tp)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestSideServerClient(t *testing.T) {
	noLeaks(t)
	s := startSide(t, SideOptions{})
	assert.Greater(t, s.Port(), 0)
	assert.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port()), s.Addr())
	ranks := []SideRank{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 7}}
	sizes := []int{0, 1, 255, 256, 3 << 20}
	for i, r := range ranks {
		s.SetPayload(r.PP, r.TP, payloadFor(r.PP, r.TP, sizes[i]))
	}
	ctx := context.Background()
	before := SideClock()
	h, err := FetchRanks(ctx, "127.0.0.1", s.Port(), ranks, SideFetchOptions{})
	after := SideClock()
	require.NoError(t, err)
	require.Len(t, h.Replies, len(ranks))
	for i, r := range ranks {
		rep := h.Replies[i]
		assert.Equal(t, r, rep.Rank)
		assert.Equal(t, payloadFor(r.PP, r.TP, sizes[i]), rep.Payload, "rank %v", r)
		assert.Equal(t, 12345.5, rep.RemoteTS)
		assert.Greater(t, rep.RTT(), time.Duration(0))
		assert.True(t, rep.LocalMid > before && rep.LocalMid < after)
		assert.InDelta(t, 12345.5-rep.LocalMid, rep.Offset(), 1e-9)
		assert.LessOrEqual(t, h.Replies[h.Best].RTT(), rep.RTT())
	}
	assert.Equal(t, h.Replies[h.Best].Offset(), h.Offset())
	// A copy was registered: changing the caller's slice changes nothing.
	p := []byte("abc")
	s.SetPayload(2, 0, p)
	p[0] = 'x'
	rep, err := FetchSide(ctx, "localhost", s.Port(), 2, 0, SideFetchOptions{})
	require.NoError(t, err)
	assert.Equal(t, []byte("abc"), rep.Payload)
	assert.Equal(t, SideRank{2, 0}, rep.Rank)
	require.Eventually(t, func() bool { return s.Stats().Served == uint64(len(ranks)+1) }, 2*time.Second, time.Millisecond)
	assert.Zero(t, s.Stats().Dropped, s.drops())
}

func TestSideClockOffset(t *testing.T) {
	noLeaks(t)
	// A peer whose clock is ours + 1000 s: the offset is 1000 within RTT/2.
	s := startSide(t, SideOptions{Now: func() float64 { return SideClock() + 1000 }})
	s.SetPayload(0, 0, []byte("p"))
	s.SetPayload(0, 1, []byte("q"))
	h, err := FetchRanks(context.Background(), "127.0.0.1", s.Port(), []SideRank{{0, 0}, {0, 1}, {0, 0}}, SideFetchOptions{})
	require.NoError(t, err)
	best := h.Replies[h.Best]
	assert.InDelta(t, 1000, h.Offset(), best.RTT().Seconds()/2+1e-6)
	// A caller's own clock.
	h, err = FetchRanks(context.Background(), "127.0.0.1", s.Port(), []SideRank{{0, 0}}, SideFetchOptions{Now: func() float64 { return SideClock() + 10 }})
	require.NoError(t, err)
	assert.InDelta(t, 990, h.Offset(), h.Replies[0].RTT().Seconds()/2+1e-6)
}

func TestSideUnknownRank(t *testing.T) {
	noLeaks(t)
	s := startSide(t, SideOptions{})
	s.SetPayload(0, 0, []byte("zero"))
	start := time.Now()
	_, err := FetchSide(context.Background(), "127.0.0.1", s.Port(), 0, 9, SideFetchOptions{Timeout: 300 * time.Millisecond})
	require.Error(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, fmt.Sprintf("vllm side channel: fetch from 127.0.0.1:%d pp 0 tp 9: no reply within 300ms (timeout): context deadline exceeded", s.Port()), err.Error())
	assert.ErrorIs(t, err, ErrSide)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool { return s.Stats().Dropped == 1 }, 2*time.Second, 5*time.Millisecond)
	d := s.drops()
	require.Len(t, d, 1)
	assert.Regexp(t, `^vllm side channel: 127\.0\.0\.1:\d+: request from 127\.0\.0\.1:\d+: pp 0 tp 9: no payload registered for that rank \(dropped\)$`, d[0])

	// It still answers; and after ClearPayload it drops that rank too.
	rep, err := FetchSide(context.Background(), "127.0.0.1", s.Port(), 0, 0, SideFetchOptions{})
	require.NoError(t, err)
	assert.Equal(t, []byte("zero"), rep.Payload)
	s.ClearPayload(0, 0)
	_, err = FetchSide(context.Background(), "127.0.0.1", s.Port(), 0, 0, SideFetchOptions{Timeout: 100 * time.Millisecond})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool { return s.Stats().Dropped == 2 }, 2*time.Second, 5*time.Millisecond)
}

// zmtpPeer is a hand-written ZMTP 3.0 peer for what no ZMQ library sends.
type zmtpPeer struct {
	t *testing.T
	c net.Conn
}

func zmtpFrame(more, command bool, body []byte) []byte {
	var f byte
	if more {
		f |= zmtpFlagMore
	}
	if command {
		f |= zmtpFlagCommand
	}
	if len(body) > 255 {
		return append(binary.BigEndian.AppendUint64([]byte{f | zmtpFlagLong}, uint64(len(body))), body...)
	}
	return append([]byte{f, byte(len(body))}, body...)
}

func zmtpReadyCmd(props ...string) []byte {
	body := append([]byte{5}, "READY"...)
	for i := 0; i+1 < len(props); i += 2 {
		body = append(body, byte(len(props[i])))
		body = append(body, props[i]...)
		body = binary.BigEndian.AppendUint32(body, uint32(len(props[i+1])))
		body = append(body, props[i+1]...)
	}
	return zmtpFrame(false, true, body)
}

// dialZMTP connects and handshakes as socketType.
func dialZMTP(t *testing.T, addr, socketType string) *zmtpPeer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	p := &zmtpPeer{t: t, c: c}
	p.write(sideGreeting[:])
	var g [64]byte
	_, err = io.ReadFull(c, g[:])
	require.NoError(t, err)
	require.Equal(t, byte(0xff), g[0])
	p.write(zmtpReadyCmd("Socket-Type", socketType))
	frames, cmd, err := p.recv()
	require.NoError(t, err)
	require.True(t, cmd)
	require.Equal(t, "\x05READY", string(frames[0][:6]))
	_ = c.SetDeadline(time.Time{})
	return p
}

func (p *zmtpPeer) write(b []byte) {
	_, err := p.c.Write(b)
	require.NoError(p.t, err)
}

func (p *zmtpPeer) send(frames ...[]byte) {
	var b []byte
	for i, f := range frames {
		b = append(b, zmtpFrame(i < len(frames)-1, false, f)...)
	}
	p.write(b)
}

func (p *zmtpPeer) recv() (frames [][]byte, command bool, err error) {
	for {
		var h [9]byte
		if _, err := io.ReadFull(p.c, h[:2]); err != nil {
			return nil, false, err
		}
		size := uint64(h[1])
		if h[0]&zmtpFlagLong != 0 {
			if _, err := io.ReadFull(p.c, h[2:]); err != nil {
				return nil, false, err
			}
			size = binary.BigEndian.Uint64(h[1:])
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(p.c, body); err != nil {
			return nil, false, err
		}
		frames = append(frames, body)
		command = command || h[0]&zmtpFlagCommand != 0
		if h[0]&zmtpFlagMore == 0 {
			return frames, command, nil
		}
	}
}

// recvWithin returns the next message, or an error when none comes within d.
func (p *zmtpPeer) recvWithin(d time.Duration) ([][]byte, error) {
	_ = p.c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = p.c.SetReadDeadline(time.Time{}) }()
	f, _, err := p.recv()
	return f, err
}

// closedWithin reports whether the server closes p's connection within d.
func (p *zmtpPeer) closedWithin(d time.Duration) bool {
	_ = p.c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, p.c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

func TestSideMalformedRequests(t *testing.T) {
	noLeaks(t)
	s := startSide(t, SideOptions{})
	s.SetPayload(0, 0, []byte("zero"))
	s.SetPayload(1, 2, []byte("one-two"))
	req := EncodeMetaRequest(1, 2)
	ok := func() {
		t.Helper()
		rep, err := FetchSide(context.Background(), "127.0.0.1", s.Port(), 1, 2, SideFetchOptions{})
		require.NoError(t, err)
		require.Equal(t, []byte("one-two"), rep.Payload)
	}

	// One DEALER connection sends every malformed message; none is
	// answered, the connection stays up, and a well-formed request on it
	// is answered afterwards.
	p := dialZMTP(t, s.Addr(), "DEALER")
	cases := []struct {
		frames [][]byte
		want   string
	}{
		{[][]byte{req}, "1 frames, want 2"},
		{[][]byte{{}, req, {}}, "3 frames, want 2"},
		{[][]byte{[]byte("x"), req}, "first frame of 1 bytes"},
		{[][]byte{{}, []byte("garbage")}, "want an array, got an integer (0x67)"},
		{[][]byte{{}, {}}, "meta request: vllm: malformed message: at byte 0: message ends early"},
		{[][]byte{{}, unhex(t, "93 c4 0c 6765745f6d6574615f6d7367 01 02 03")}, "1 bytes after"},
		{[][]byte{{}, unhex(t, "93 a3 666f6f 01 02")}, `element 0 is "foo", want "get_meta_msg"`},
		{[][]byte{{}, EncodeMetaRequest(5, 5)}, "pp 5 tp 5: no payload registered"},
		{[][]byte{{}, bytes.Repeat([]byte{1}, DefaultSideMaxRequest)}, "want an array, got an integer (0x01)"},
	}
	for _, c := range cases {
		p.send(c.frames...)
	}
	// A PING command is dropped as well.
	p.write(zmtpFrame(false, true, append([]byte{4}, "PING\x00\x00"...)))
	p.send([]byte{}, req)
	got, err := p.recvWithin(5 * time.Second)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Empty(t, got[0])
	assert.Equal(t, "one-two", string(got[1]))
	assert.Equal(t, EncodeTimestamp(12345.5), got[2])
	_, err = p.recvWithin(100 * time.Millisecond)
	assert.Error(t, err, "nothing else was answered")
	d := s.drops()
	require.Len(t, d, len(cases)+1)
	for i, c := range cases {
		assert.Contains(t, d[i], c.want)
		assert.Contains(t, d[i], "request from 127.0.0.1:")
	}
	assert.Contains(t, d[len(cases)], "a ZMTP command where a request was due")
	ok()
}

func TestSideHostileConnections(t *testing.T) {
	noLeaks(t)
	s := startSide(t, SideOptions{MaxPeers: 8, HandshakeTimeout: 300 * time.Millisecond, MaxRequest: 64})
	s.SetPayload(1, 2, []byte("one-two"))
	ok := func() {
		t.Helper()
		rep, err := FetchSide(context.Background(), "127.0.0.1", s.Port(), 1, 2, SideFetchOptions{Timeout: 2 * time.Second})
		require.NoError(t, err)
		require.Equal(t, []byte("one-two"), rep.Payload)
	}
	raw := func() net.Conn {
		c, err := net.Dial("tcp", s.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	greeting := func(c net.Conn) {
		_, err := c.Write(sideGreeting[:])
		require.NoError(t, err)
		var g [64]byte
		_, err = io.ReadFull(c, g[:])
		require.NoError(t, err)
	}
	drops := 0
	dropped := func(want string) {
		t.Helper()
		drops++
		require.Eventually(t, func() bool { return len(s.drops()) >= drops }, 3*time.Second, 5*time.Millisecond, "want a drop: %s", want)
		assert.Contains(t, s.drops()[drops-1], want)
	}

	// A connection that says nothing does not hold up others, and is
	// closed after HandshakeTimeout.
	silent := raw()
	ok()
	dropped("ZMTP handshake with 127.0.0.1:")
	_ = silent

	// Not ZMTP.
	c := raw()
	_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n" + strings.Repeat("x", 64)))
	dropped("not a ZMTP 3 greeting")
	// A READY whose property runs past its end: this panics zmq4's own
	// accept loop (slice bounds out of range in Metadata.UnmarshalZMTP).
	c = raw()
	greeting(c)
	body := append(append([]byte{5}, "READY"...), 11)
	body = append(body, "Socket-Type"...)
	_, _ = c.Write(zmtpFrame(false, true, body))
	dropped("READY: malformed property")
	// The wrong socket type.
	c = raw()
	greeting(c)
	_, _ = c.Write(zmtpReadyCmd("Socket-Type", "PUB"))
	dropped(`peer socket type "PUB"`)
	// A CURVE peer.
	c = raw()
	g := sideGreeting
	copy(g[12:32], "CURVE\x00\x00\x00")
	_, _ = c.Write(g[:])
	dropped(`security mechanism "CURVE"`)
	ok()

	// A frame header announcing 2^63-1 bytes: this panics zmq4's reader
	// (makeslice: len out of range). Here it closes the connection.
	p := dialZMTP(t, s.Addr(), "REQ")
	p.write([]byte{zmtpFlagLong, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	assert.True(t, p.closedWithin(2*time.Second))
	dropped("frame of 9223372036854775807 bytes exceeds the 64-byte limit (oversize)")
	// A request frame just over MaxRequest.
	p = dialZMTP(t, s.Addr(), "REQ")
	p.send([]byte{}, bytes.Repeat([]byte{0x90}, 65))
	assert.True(t, p.closedWithin(2*time.Second))
	dropped("frame of 65 bytes exceeds the 64-byte limit (oversize)")
	// Too many frames in one message; reserved flag bits.
	p = dialZMTP(t, s.Addr(), "DEALER")
	p.send(make([][]byte, 9)...)
	assert.True(t, p.closedWithin(2*time.Second))
	dropped("more than 8 frames in one message")
	p = dialZMTP(t, s.Addr(), "DEALER")
	p.write([]byte{0x80, 0})
	assert.True(t, p.closedWithin(2*time.Second))
	dropped("reserved bits")
	ok()

	// MaxPeers: with 8 open, the 9th is refused and counted; once they go,
	// others are served again.
	require.Eventually(t, func() bool { return s.Stats().Peers == 0 }, 2*time.Second, 5*time.Millisecond)
	var peers []*zmtpPeer
	for range 8 {
		peers = append(peers, dialZMTP(t, s.Addr(), "DEALER"))
	}
	require.Eventually(t, func() bool { return s.Stats().Peers == 8 }, 2*time.Second, 5*time.Millisecond)
	extra, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = extra.Read(make([]byte, 1))
	assert.Error(t, err)
	dropped("8 peers connected already (MaxPeers)")
	for _, p := range peers {
		_ = p.c.Close()
	}
	require.Eventually(t, func() bool { return s.Stats().Peers == 0 }, 2*time.Second, 5*time.Millisecond)
	ok()
	assert.Equal(t, uint64(drops), s.Stats().Dropped)
}

func TestSideIdleTimeout(t *testing.T) {
	noLeaks(t)
	s := startSide(t, SideOptions{IdleTimeout: 200 * time.Millisecond})
	p := dialZMTP(t, s.Addr(), "REQ")
	start := time.Now()
	assert.True(t, p.closedWithin(3*time.Second))
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	assert.Zero(t, s.Stats().Dropped, "an idle close is not a drop")
}

func TestSideConcurrentClients(t *testing.T) {
	noLeaks(t)
	s := startSide(t, SideOptions{})
	for pp := range 2 {
		for tp := range 4 {
			s.SetPayload(pp, tp, payloadFor(pp, tp, 1000+100*tp))
		}
	}
	const clients = 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ranks := []SideRank{{i % 2, i % 4}, {(i + 1) % 2, (i + 3) % 4}}
			h, err := FetchRanks(context.Background(), "127.0.0.1", s.Port(), ranks, SideFetchOptions{})
			if err != nil {
				errs <- err
				return
			}
			for j, r := range ranks {
				if !bytes.Equal(h.Replies[j].Payload, payloadFor(r.PP, r.TP, 1000+100*r.TP)) {
					errs <- fmt.Errorf("client %d rank %v: wrong payload", i, r)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Eventually(t, func() bool { return s.Stats().Served == 2*clients }, 2*time.Second, time.Millisecond)
	assert.Zero(t, s.Stats().Dropped, s.drops())
}

func TestSideCloseTwice(t *testing.T) {
	noLeaks(t)
	s, err := ListenSide("127.0.0.1", 0, SideOptions{})
	require.NoError(t, err)
	s.SetPayload(0, 0, []byte("x"))
	_, err = FetchSide(context.Background(), "127.0.0.1", s.Port(), 0, 0, SideFetchOptions{})
	require.NoError(t, err)
	// A connection left open, and one mid-handshake, when it closes.
	p := dialZMTP(t, s.Addr(), "REQ")
	half, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer half.Close()
	port := s.Port()
	assert.NoError(t, s.Close())
	assert.NoError(t, s.Close())
	assert.True(t, p.closedWithin(2*time.Second))
	// The port is free again.
	s2, err := ListenSide("127.0.0.1", port, SideOptions{})
	require.NoError(t, err)
	assert.Equal(t, port, s2.Port())
	require.NoError(t, s2.Close())
}

func TestListenSideAddresses(t *testing.T) {
	noLeaks(t)
	s, err := ListenSide("localhost", 0, SideOptions{})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port()), s.Addr())

	_, err = ListenSide("127.0.0.1", s.Port(), SideOptions{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrSide)
	assert.Contains(t, err.Error(), fmt.Sprintf("vllm side channel: listen on 127.0.0.1:%d (127.0.0.1:%d): listen tcp 127.0.0.1:%d: bind: address already in use", s.Port(), s.Port(), s.Port()))

	_, err = ListenSide("no-such-host.invalid", 0, SideOptions{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrSide)
	assert.Contains(t, err.Error(), `listen on no-such-host.invalid:0: resolve "no-such-host.invalid"`)

	if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
		_ = l.Close()
		s6, err := ListenSide("::1", 0, SideOptions{})
		require.NoError(t, err)
		defer s6.Close()
		assert.Equal(t, "[::1]:"+strconv.Itoa(s6.Port()), s6.Addr())
		s6.SetPayload(0, 0, []byte("v6"))
		rep, err := FetchSide(context.Background(), "::1", s6.Port(), 0, 0, SideFetchOptions{})
		require.NoError(t, err)
		assert.Equal(t, []byte("v6"), rep.Payload)
	}
}

// serveZMTP runs handle on each connection to a hand-written ROUTER.
func serveZMTP(t *testing.T, handle func(p *zmtpPeer)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(&zmtpPeer{t: t, c: c})
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// routerHandshake is the server half of dialZMTP, without assertions (it
// runs off the test goroutine).
func (p *zmtpPeer) routerHandshake() bool {
	_ = p.c.SetDeadline(time.Now().Add(5 * time.Second))
	var g [64]byte
	if _, err := p.c.Write(sideGreeting[:]); err != nil {
		return false
	}
	if _, err := io.ReadFull(p.c, g[:]); err != nil {
		return false
	}
	if _, err := p.c.Write(zmtpReadyCmd("Socket-Type", "ROUTER")); err != nil {
		return false
	}
	if _, _, err := p.recv(); err != nil {
		return false
	}
	_ = p.c.SetDeadline(time.Time{})
	return true
}

func (p *zmtpPeer) sendQuiet(frames ...[]byte) {
	var b []byte
	for i, f := range frames {
		b = append(b, zmtpFrame(i < len(frames)-1, false, f)...)
	}
	_, _ = p.c.Write(b)
}

func TestFetchBadReplies(t *testing.T) {
	noLeaks(t)
	ts := EncodeTimestamp(1.5)
	// The reply depends on the requested tp.
	port := serveZMTP(t, func(p *zmtpPeer) {
		if !p.routerHandshake() {
			return
		}
		for {
			f, _, err := p.recv()
			if err != nil || len(f) != 2 {
				return
			}
			_, tp, err := DecodeMetaRequest(f[1])
			if err != nil {
				return
			}
			switch tp {
			case 0:
				p.sendQuiet([]byte{}, []byte("ok"), ts)
			case 1:
				p.sendQuiet([]byte{}, []byte("a"), []byte("b"), ts)
			case 2:
				p.sendQuiet([]byte{}, []byte("p"), []byte("\xc1 not msgpack"))
			case 3:
				p.sendQuiet([]byte{}, make([]byte, 2048), ts)
			case 4:
				_, _ = p.c.Write([]byte{zmtpFlagMore, 0, zmtpFlagLong, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
			case 5:
				// No reply.
			case 6:
				// A PING first, then the reply.
				_, _ = p.c.Write(zmtpFrame(false, true, append([]byte{4}, "PING\x00\x00"...)))
				p.sendQuiet([]byte{}, []byte("after ping"), ts)
			}
		}
	})
	ctx := context.Background()
	opts := SideFetchOptions{Timeout: 300 * time.Millisecond, MaxPayload: 1024}
	rep, err := FetchSide(ctx, "127.0.0.1", port, 0, 0, opts)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(rep.Payload))
	assert.Equal(t, 1.5, rep.RemoteTS)
	rep, err = FetchSide(ctx, "127.0.0.1", port, 0, 6, opts)
	require.NoError(t, err)
	assert.Equal(t, "after ping", string(rep.Payload))

	prefix := fmt.Sprintf("vllm side channel: fetch from 127.0.0.1:%d pp 0 tp ", port)
	for tp, want := range map[int]string{
		1: "1: reply has 3 frames, want 2 (payload, timestamp) (frame count)",
		2: "2: timestamp frame: timestamp: vllm: malformed message: at byte 0: want a number, got the unused code 0xc1",
		3: "3: reply frame of 2048 bytes exceeds the 1024-byte limit (oversize)",
		4: "4: reply frame of 9223372036854775807 bytes exceeds the 1024-byte limit (oversize)",
		5: "5: no reply within 300ms (timeout): context deadline exceeded",
	} {
		_, err := FetchSide(ctx, "127.0.0.1", port, 0, tp, opts)
		require.Error(t, err, tp)
		assert.Equal(t, prefix+want, err.Error())
		assert.ErrorIs(t, err, ErrSide)
	}
	// FetchRanks stops at the first failure and returns what it had.
	h, err := FetchRanks(ctx, "127.0.0.1", port, []SideRank{{0, 0}, {0, 1}, {0, 0}}, opts)
	require.Error(t, err)
	assert.Len(t, h.Replies, 1)
	_, err = FetchRanks(ctx, "127.0.0.1", port, nil, opts)
	assert.EqualError(t, err, fmt.Sprintf("vllm side channel: fetch from 127.0.0.1:%d: no ranks to ask for", port))
}

func TestFetchBadServerHandshake(t *testing.T) {
	noLeaks(t)
	// A READY whose property runs past its end (zmq4's client would panic).
	port := serveZMTP(t, func(p *zmtpPeer) {
		_, _ = p.c.Write(sideGreeting[:])
		body := append(append([]byte{5}, "READY"...), 11)
		_, _ = p.c.Write(zmtpFrame(false, true, append(body, "Socket-Type"...)))
		_, _ = io.Copy(io.Discard, p.c)
	})
	_, err := FetchSide(context.Background(), "127.0.0.1", port, 0, 0, SideFetchOptions{Timeout: time.Second})
	assert.EqualError(t, err, fmt.Sprintf("vllm side channel: fetch from 127.0.0.1:%d pp 0 tp 0: ZMTP handshake: READY: malformed property", port))
	// A server that accepts and says nothing.
	port = serveZMTP(t, func(p *zmtpPeer) { _, _ = io.Copy(io.Discard, p.c) })
	_, err = FetchSide(context.Background(), "127.0.0.1", port, 0, 0, SideFetchOptions{Timeout: 200 * time.Millisecond})
	require.Error(t, err)
	assert.Regexp(t, fmt.Sprintf(`^vllm side channel: fetch from 127\.0\.0\.1:%d pp 0 tp 0: no connection within 200ms \(timeout\): ZMTP handshake: read greeting: read tcp 127\.0\.0\.1:\d+->127\.0\.0\.1:%d: i/o timeout$`, port, port), err.Error())
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, ErrSide)
}

func TestFetchRefusedAndCancelled(t *testing.T) {
	noLeaks(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	start := time.Now()
	_, err = FetchSide(context.Background(), "127.0.0.1", port, 0, 0, SideFetchOptions{Timeout: 350 * time.Millisecond})
	require.Error(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 350*time.Millisecond)
	assert.Less(t, time.Since(start), 1500*time.Millisecond)
	assert.Contains(t, err.Error(), fmt.Sprintf("vllm side channel: fetch from 127.0.0.1:%d pp 0 tp 0: no connection within 350ms (timeout): connect: ", port))
	assert.ErrorIs(t, err, ErrSide)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)

	// A server that is late: connecting is retried until it is up.
	late := make(chan *SideServer, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		s, err := ListenSide("127.0.0.1", port, SideOptions{})
		if err == nil {
			s.SetPayload(0, 0, []byte("late"))
		}
		late <- s
	}()
	rep, err := FetchSide(context.Background(), "127.0.0.1", port, 0, 0, SideFetchOptions{Timeout: 2 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, "late", string(rep.Payload))
	if ls := <-late; ls != nil {
		require.NoError(t, ls.Close())
	}

	// Cancelling the context ends a fetch waiting for a reply at once.
	s := startSide(t, SideOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	_, err = FetchSide(ctx, "127.0.0.1", s.Port(), 0, 0, SideFetchOptions{})
	require.Error(t, err)
	assert.Less(t, time.Since(start), time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, fmt.Sprintf("vllm side channel: fetch from 127.0.0.1:%d pp 0 tp 0: receive: context canceled", s.Port()), err.Error())
}

// noLeaks checks for leaked goroutines after the test's cleanups (servers
// closed by t.Cleanup) have run.
func noLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}
