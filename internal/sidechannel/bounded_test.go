package sidechannel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// bodyReadSignal wraps a served connection and signals once, on the first
// Read after the frame header was delivered: by then the server has made
// whatever buffer it makes for the body, and waits for the body's bytes.
type bodyReadSignal struct {
	net.Conn
	got    int
	once   sync.Once
	signal chan<- struct{}
}

func (c *bodyReadSignal) Read(p []byte) (int, error) {
	if c.got >= headerLen {
		c.once.Do(func() { c.signal <- struct{}{} })
	}
	n, err := c.Conn.Read(p)
	c.got += n
	return n, err
}

func hookBodyRead(signal chan<- struct{}) func(net.Conn) net.Conn {
	return func(c net.Conn) net.Conn { return &bodyReadSignal{Conn: c, signal: signal} }
}

// dialHeaderOnly connects and sends only a frame header claiming n bytes.
func dialHeaderOnly(t *testing.T, addr string, n uint32) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	var hdr [headerLen]byte
	binary.BigEndian.PutUint32(hdr[:], n)
	_, err = c.Write(hdr[:])
	require.NoError(t, err)
	return c
}

// assertClosedByPeer checks that the server closed c: a clean end of stream,
// or a reset when the server closed it with bytes still unread.
func assertClosedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("want the server to close the connection, got %v", err)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Defect 8: every connection that sent only a header claiming 16 MiB made
// the server allocate 16 MiB (32 connections held 512 MiB). Memory must
// follow the bytes received, not the header's claim.
func TestHeaderOnlyConnectionsHoldLittleMemory(t *testing.T) {
	const conns = 32
	signal := make(chan struct{}, conns)
	s := listen(t, ServerOptions{MaxFrame: DefaultMaxFrame, testHookConn: hookBodyRead(signal)})
	before := heapInUse()
	for range conns {
		dialHeaderOnly(t, s.Addr().String(), DefaultMaxFrame)
	}
	for range conns {
		<-signal
	}
	after := heapInUse()
	grown := int64(after) - int64(before)
	t.Logf("heap grew by %d KiB for %d connections that each claimed %d MiB", grown>>10, conns, DefaultMaxFrame>>20)
	// Each connection may hold one read chunk; 8 MiB is a generous margin
	// (the old reader held 512 MiB here).
	assert.Less(t, grown, int64(8<<20), "heap must not follow what headers claim")
}

// Defect 8: a frame's memory is proportional to what arrived, also for a
// reader that is not a server connection (the client reading a reply).
func TestReadFrameAllocatesWhatArrives(t *testing.T) {
	var hdr [headerLen]byte
	binary.BigEndian.PutUint32(hdr[:], DefaultMaxFrame)
	sent := bytes.Repeat([]byte{0x5a}, 100<<10)
	raw := append(hdr[:], sent...)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	_, err := ReadFrame(bytes.NewReader(raw), DefaultMaxFrame)
	runtime.ReadMemStats(&ms1)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	alloc := ms1.TotalAlloc - ms0.TotalAlloc
	t.Logf("allocated %d KiB for a cut frame of %d KiB claiming %d MiB", alloc>>10, len(sent)>>10, DefaultMaxFrame>>20)
	assert.Less(t, alloc, uint64(4*len(sent)+readChunk+64<<10))

	// Whole frames still read, whatever their size relative to the chunk.
	for _, n := range []int{0, 1, readChunk - 1, readChunk, readChunk + 1, 5*readChunk + 3, 1 << 20} {
		body := bytes.Repeat([]byte{byte(n)}, n)
		var buf bytes.Buffer
		require.NoError(t, WriteFrame(&buf, body, DefaultMaxFrame))
		got, err := ReadFrame(iotestHalfReader{&buf}, DefaultMaxFrame)
		require.NoError(t, err)
		require.Equal(t, body, got, "frame of %d bytes", n)
	}
}

// iotestHalfReader returns at most half of what is asked, as a slow peer.
type iotestHalfReader struct{ r io.Reader }

func (h iotestHalfReader) Read(p []byte) (int, error) {
	return h.r.Read(p[:(len(p)+1)/2])
}

// Defect 8: connections over MaxConns are closed on arrival and counted.
func TestConnectionLimitRefusesExtraConnections(t *testing.T) {
	const limit, extra = 4, 3
	signal := make(chan struct{}, limit)
	var refused atomic.Int64
	s := listen(t, ServerOptions{
		MaxConns:      limit,
		testHookConn:  hookBodyRead(signal),
		OnConnRefused: func(net.Addr) { refused.Add(1) },
	})
	for range limit {
		dialHeaderOnly(t, s.Addr().String(), 100)
	}
	for range limit {
		<-signal // all four are being served
	}
	for range extra {
		c := dialHeaderOnly(t, s.Addr().String(), 100)
		assertClosedByPeer(t, c)
	}
	assert.Equal(t, uint64(extra), s.RefusedConns())
	assert.Equal(t, int64(extra), refused.Load())

	// A client over the limit is told what may have happened.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Call[ping, pong](ctx, s.Addr().String(), ping{}, 0, time.Second)
	require.Error(t, err)
	assert.ErrorContains(t, err, "closed the connection without replying")
	assert.Equal(t, uint64(extra+1), s.RefusedConns())
}

func TestDefaultConnectionLimit(t *testing.T) {
	var o ServerOptions
	o.fill()
	assert.Equal(t, DefaultMaxConns, o.MaxConns)
	assert.Equal(t, DefaultMaxRequestFrame, o.MaxFrame, "servers read only small requests by default")
}

// Defect 8: by default a server refuses requests larger than a hello can be.
func TestDefaultRequestLimit(t *testing.T) {
	bad := make(chan error, 1)
	s := listen(t, ServerOptions{OnMalformed: func(err error) { bad <- err }})
	c := dialHeaderOnly(t, s.Addr().String(), DefaultMaxRequestFrame+1)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
	assert.ErrorIs(t, <-bad, ErrFrameTooLarge)

	// A request of the largest size allowed is answered.
	b, err := Encode(ping{Name: strings.Repeat("n", DefaultMaxRequestFrame-16)})
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), DefaultMaxRequestFrame)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := Call[ping, pong](ctx, s.Addr().String(), ping{Name: strings.Repeat("n", DefaultMaxRequestFrame-16)}, 0, time.Second)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got.Greeting, "hello nnn"))
}

// Defect 8: a header followed by nothing is closed after FrameTimeout, not
// IdleTimeout, and counted.
func TestFrameTimeout(t *testing.T) {
	bad := make(chan error, 1)
	s := listen(t, ServerOptions{IdleTimeout: time.Hour, FrameTimeout: 20 * time.Millisecond, OnMalformed: func(err error) { bad <- err }})
	c := dialHeaderOnly(t, s.Addr().String(), 10)
	c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the server closes a connection whose frame does not arrive")
	err = <-bad
	assert.ErrorIs(t, err, errFrameTimeout)
	assert.ErrorContains(t, err, "frame timeout")
}

// Defect 8: an HTTP client talking to the side channel is named as such,
// in the counted error and in a warn-level log line.
func TestServerSaysPeerSpeaksHTTP(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	bad := make(chan error, 2)
	s := listen(t, ServerOptions{Logger: zap.New(core), OnMalformed: func(err error) { bad <- err }})
	for range 2 {
		c, err := net.Dial("tcp", s.Addr().String())
		require.NoError(t, err)
		_, err = io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		assertClosedByPeer(t, c)
		c.Close()
		err = <-bad
		assert.ErrorIs(t, err, ErrSpeaksHTTP)
		assert.ErrorIs(t, err, ErrMalformed)
		assert.ErrorContains(t, err, `speaks HTTP (its bytes start with "GET ")`)
	}
	warn := logs.FilterLevelExact(zapcore.WarnLevel).All()
	require.Len(t, warn, 1, "one warning, then debug lines")
	assert.Contains(t, warn[0].Message, "speaks HTTP")
	assert.Contains(t, warn[0].Message, "API port")
}

// Defect 8: a client whose side-channel address is an HTTP port says so.
func TestCallToHTTPPortSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// As nginx or any HTTP server that answers bytes it cannot parse.
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		bufio.NewReader(c).Peek(1)
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	}()
	defer func() { ln.Close(); wg.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Call[ping, pong](ctx, ln.Addr().String(), ping{}, 0, time.Second)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrSpeaksHTTP)
	assert.ErrorContains(t, err, "reply from "+ln.Addr().String())
	assert.ErrorContains(t, err, "is this the engine's API port instead of its side-channel port?")
}

func TestReadFrameNamesHTTP(t *testing.T) {
	for _, start := range []string{"GET ", "POST", "HTTP", "PUT ", "HEAD"} {
		_, err := ReadFrame(strings.NewReader(start+"/ whatever"), DefaultMaxFrame)
		assert.ErrorIs(t, err, ErrSpeaksHTTP, start)
		assert.False(t, errors.Is(err, ErrFrameTooLarge), start)
	}
	// A frame header is not mistaken for HTTP.
	_, err := ReadFrame(bytes.NewReader([]byte{0, 0, 0, 1, 0xc0}), 10)
	assert.NoError(t, err)
}
