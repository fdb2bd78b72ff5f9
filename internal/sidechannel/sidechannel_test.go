package sidechannel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type ping struct {
	Name string `msgpack:"name"`
	N    int    `msgpack:"n"`
}

type pong struct {
	Greeting string `msgpack:"greeting"`
	Double   int    `msgpack:"double"`
}

func echo(p ping) pong { return pong{Greeting: "hello " + p.Name, Double: 2 * p.N} }

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteFrame(&buf, []byte("abc"), 10))
	require.NoError(t, WriteFrame(&buf, nil, 10))
	assert.Equal(t, []byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0}, buf.Bytes())
	b, err := ReadFrame(&buf, 10)
	require.NoError(t, err)
	assert.Equal(t, "abc", string(b))
	b, err = ReadFrame(&buf, 10)
	require.NoError(t, err)
	assert.Empty(t, b)
	_, err = ReadFrame(&buf, 10)
	assert.ErrorIs(t, err, io.EOF)
}

func TestFrameLimits(t *testing.T) {
	err := WriteFrame(io.Discard, make([]byte, 11), 10)
	assert.ErrorIs(t, err, ErrFrameTooLarge)
	_, err = ReadFrame(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}), 10)
	assert.ErrorIs(t, err, ErrFrameTooLarge)
	assert.ErrorContains(t, err, "header says 4294967295 bytes, limit 10")
	_, err = ReadFrame(bytes.NewReader([]byte{0, 0, 0, 5, 'a'}), 10)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = ReadFrame(bytes.NewReader([]byte{0, 0}), 10)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestDecodeRejectsTrailingAndWrongTypes(t *testing.T) {
	b, err := Encode(ping{Name: "a", N: 1})
	require.NoError(t, err)
	var p ping
	require.NoError(t, Decode(b, &p))
	assert.Equal(t, ping{Name: "a", N: 1}, p)
	assert.ErrorIs(t, Decode(append(b, 0xc0), &p), ErrMalformed)
	assert.ErrorIs(t, Decode(b[:len(b)-1], &p), ErrMalformed)
	bad, _ := Encode(map[string]any{"name": 7})
	assert.ErrorIs(t, Decode(bad, &p), ErrMalformed)
}

func listen(t *testing.T, opts ServerOptions) *Server[ping, pong] {
	t.Helper()
	s, err := Listen("127.0.0.1:0", echo, opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestCallAnswers(t *testing.T) {
	s := listen(t, ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := Call[ping, pong](ctx, s.Addr().String(), ping{Name: "decode", N: 21}, 0, time.Second)
	require.NoError(t, err)
	assert.Equal(t, pong{Greeting: "hello decode", Double: 42}, got)
}

func TestSeveralRequestsOnOneConnection(t *testing.T) {
	s := listen(t, ServerOptions{})
	c, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	for i := 1; i <= 3; i++ {
		b, _ := Encode(ping{Name: "x", N: i})
		require.NoError(t, WriteFrame(c, b, DefaultMaxFrame))
		r, err := ReadFrame(c, DefaultMaxFrame)
		require.NoError(t, err)
		var p pong
		require.NoError(t, Decode(r, &p))
		assert.Equal(t, 2*i, p.Double)
	}
}

func TestMalformedFramesCountedAndConnectionClosed(t *testing.T) {
	var bad atomic.Int64
	s := listen(t, ServerOptions{MaxFrame: 64, OnMalformed: func(error) { bad.Add(1) }})
	for _, raw := range [][]byte{
		{0, 0, 0, 2, 0xc1, 0xc1},             // 0xc1 is never valid msgpack
		{0, 0, 1, 0},                         // 256 > MaxFrame 64
		{0, 0, 0, 1, 0x01},                   // a number, not a ping map
		append([]byte{0, 0, 0, 3}, "abc"...), // a fixint and trailing bytes
	} {
		c, err := net.Dial("tcp", s.Addr().String())
		require.NoError(t, err)
		_, err = c.Write(raw)
		require.NoError(t, err)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, io.EOF, "server closes the connection after %x", raw)
		c.Close()
	}
	assert.Equal(t, int64(4), bad.Load())
	// The server still answers well-formed requests.
	got, err := Call[ping, pong](context.Background(), s.Addr().String(), ping{Name: "ok"}, 64, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "hello ok", got.Greeting)
}

func TestCutFrameCountedAsMalformed(t *testing.T) {
	var bad atomic.Int64
	s := listen(t, ServerOptions{OnMalformed: func(error) { bad.Add(1) }})
	c, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	c.Write([]byte{0, 0, 0, 9, 1, 2})
	c.Close()
	require.Eventually(t, func() bool { return bad.Load() == 1 }, 5*time.Second, time.Millisecond)
}

func TestIdleConnectionClosed(t *testing.T) {
	s := listen(t, ServerOptions{IdleTimeout: 20 * time.Millisecond})
	c, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
}

func TestCallToDeadAddressFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	_, err = Call[ping, pong](context.Background(), addr, ping{}, 0, time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sidechannel: dial "+addr)
}

func TestCallHonoursDeadlineWhenServerIsSilent(t *testing.T) {
	// A listener that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	defer func() { ln.Close(); wg.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = Call[ping, pong](ctx, ln.Addr().String(), ping{}, 0, time.Hour)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestCallCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	defer func() { ln.Close(); wg.Wait() }()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = Call[ping, pong](ctx, ln.Addr().String(), ping{}, 0, time.Hour)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestCloseEndsOpenConnections(t *testing.T) {
	s, err := Listen("127.0.0.1:0", echo, ServerOptions{})
	require.NoError(t, err)
	c, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	// Make sure the server has accepted it before closing.
	b, _ := Encode(ping{})
	require.NoError(t, WriteFrame(c, b, DefaultMaxFrame))
	_, err = ReadFrame(c, DefaultMaxFrame)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.NoError(t, s.Close(), "idempotent")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.Error(t, err)
}

func TestCacheOneFlightPerKey(t *testing.T) {
	var c Cache[int]
	var fetches atomic.Int64
	release := make(chan struct{})
	fetch := func(context.Context) (int, error) {
		fetches.Add(1)
		<-release
		return 7, nil
	}
	var wg sync.WaitGroup
	results := make([]int, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.Get(context.Background(), "engine-a", fetch)
			assert.NoError(t, err)
			results[i] = v
		}()
	}
	require.Eventually(t, func() bool { return fetches.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(10 * time.Millisecond) // let the others queue up behind the flight
	close(release)
	wg.Wait()
	assert.Equal(t, int64(1), fetches.Load())
	for _, r := range results {
		assert.Equal(t, 7, r)
	}
	v, err := c.Get(context.Background(), "engine-a", func(context.Context) (int, error) { return 0, errors.New("not called") })
	require.NoError(t, err)
	assert.Equal(t, 7, v, "reused after success")
}

func TestCacheDoesNotKeepFailures(t *testing.T) {
	var c Cache[int]
	boom := errors.New("boom")
	_, err := c.Get(context.Background(), "k", func(context.Context) (int, error) { return 0, boom })
	assert.ErrorIs(t, err, boom)
	_, ok := c.Peek("k")
	assert.False(t, ok)
	v, err := c.Get(context.Background(), "k", func(context.Context) (int, error) { return 3, nil })
	require.NoError(t, err)
	assert.Equal(t, 3, v)
	c.Forget("k")
	_, ok = c.Peek("k")
	assert.False(t, ok)
}

func TestCacheWaiterHonoursItsContext(t *testing.T) {
	var c Cache[int]
	release := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Get(context.Background(), "k", func(context.Context) (int, error) { close(started); <-release; return 1, nil })
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := c.Get(ctx, "k", nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	wg.Wait()
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader and the decoder,
// as a server does with what a peer sends: errors, never panics, and what
// decodes re-encodes to an equal value.
func FuzzReadFrame(f *testing.F) {
	good, _ := Encode(ping{Name: "n", N: 1})
	hdr := make([]byte, 4)
	binary.BigEndian.PutUint32(hdr, uint32(len(good)))
	f.Add(append(hdr, good...))
	f.Add([]byte{0, 0, 0, 2, 0xc1, 0xc1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 5, 0xdd, 0xff, 0xff, 0xff, 0xff}) // array32 claiming 4G elements
	f.Add([]byte{0, 0, 0, 6, 0x81, 0xa4, 'n', 'a', 'm', 'e'})
	f.Fuzz(func(t *testing.T, raw []byte) {
		body, err := ReadFrame(bytes.NewReader(raw), 1<<16)
		if err != nil {
			return
		}
		var p ping
		if err := Decode(body, &p); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode error %v does not match ErrMalformed", err)
			}
			return
		}
		again, err := Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		var q ping
		if err := Decode(again, &q); err != nil || q != p {
			t.Fatalf("re-decode: %v %+v != %+v", err, q, p)
		}
	})
}
