package vllm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// oracleRequest parses a well-formed GET_META_MSG request by hand, without
// the msgpack package: a 3-element array (any array header), element 0
// "get_meta_msg" as bin or str (any length header), two non-negative
// integers up to MaxInt32 (any integer header), nothing after.
func oracleRequest(b []byte) (SideRank, bool) {
	take := func(n int) ([]byte, bool) {
		if len(b) < n {
			return nil, false
		}
		v := b[:n]
		b = b[n:]
		return v, true
	}
	be := func(v []byte) uint64 {
		var u uint64
		for _, c := range v {
			u = u<<8 | uint64(c)
		}
		return u
	}
	h, ok := take(1)
	if !ok {
		return SideRank{}, false
	}
	var n uint64
	switch {
	case h[0]&0xf0 == 0x90:
		n = uint64(h[0] & 0x0f)
	case h[0] == 0xdc || h[0] == 0xdd:
		v, ok := take(map[byte]int{0xdc: 2, 0xdd: 4}[h[0]])
		if !ok {
			return SideRank{}, false
		}
		n = be(v)
	default:
		return SideRank{}, false
	}
	if n != 3 {
		return SideRank{}, false
	}
	h, ok = take(1)
	if !ok {
		return SideRank{}, false
	}
	var l uint64
	switch {
	case h[0]&0xe0 == 0xa0:
		l = uint64(h[0] & 0x1f)
	case h[0] == 0xc4 || h[0] == 0xd9:
		v, ok := take(1)
		if !ok {
			return SideRank{}, false
		}
		l = be(v)
	case h[0] == 0xc5 || h[0] == 0xda:
		v, ok := take(2)
		if !ok {
			return SideRank{}, false
		}
		l = be(v)
	case h[0] == 0xc6 || h[0] == 0xdb:
		v, ok := take(4)
		if !ok {
			return SideRank{}, false
		}
		l = be(v)
	default:
		return SideRank{}, false
	}
	if l != 12 {
		return SideRank{}, false
	}
	if v, ok := take(12); !ok || string(v) != "get_meta_msg" {
		return SideRank{}, false
	}
	rank := func() (int, bool) {
		h, ok := take(1)
		if !ok {
			return 0, false
		}
		var v int64
		switch c := h[0]; {
		case c <= 0x7f:
			v = int64(c)
		case c >= 0xe0:
			return 0, false
		case c >= 0xcc && c <= 0xcf:
			x, ok := take(1 << (c - 0xcc))
			if !ok {
				return 0, false
			}
			u := be(x)
			if u > math.MaxInt32 {
				return 0, false
			}
			v = int64(u)
		case c >= 0xd0 && c <= 0xd3:
			x, ok := take(1 << (c - 0xd0))
			if !ok {
				return 0, false
			}
			u := be(x)
			shift := 64 - 8*len(x)
			v = int64(u<<shift) >> shift
		default:
			return 0, false
		}
		if v < 0 || v > math.MaxInt32 {
			return 0, false
		}
		return int(v), true
	}
	pp, ok := rank()
	if !ok {
		return SideRank{}, false
	}
	tp, ok := rank()
	if !ok || len(b) != 0 {
		return SideRank{}, false
	}
	return SideRank{pp, tp}, true
}

func FuzzSideRequest(f *testing.F) {
	get := []byte("\x93\xc4\x0cget_meta_msg")
	for _, req := range [][]byte{
		EncodeMetaRequest(0, 0),
		EncodeMetaRequest(0, 1),
		EncodeMetaRequest(3, 200),
		EncodeMetaRequest(0, 9),
		append(get, 0xd0, 0x01, 0xcd, 0x00, 0x00),
		append(get, 0xff, 0x00),
		append(get, 0x00),
		append(get, 0x00, 0x00, 0x00),
		append(get, 0xc0, 0x00),
		[]byte("\x93\xacget_meta_msg\x00\x01"),
		[]byte("\xdc\x00\x03\xd9\x0cget_meta_msg\x01\x00"),
		[]byte("\x92\xc4\x0cget_meta_msg\x00"),
		{},
		{0xdd, 0xff, 0xff, 0xff, 0xff},
	} {
		for n := range uint8(6) {
			f.Add([]byte("gonixl-peer-1"), []byte{}, req, n, false)
		}
		f.Add([]byte("id"), []byte{}, req, uint8(2), true)
		f.Add([]byte("id"), []byte{0}, req, uint8(2), false)
	}
	payloads := map[SideRank][]byte{
		{0, 0}:   {},
		{0, 1}:   []byte("zero-one"),
		{1, 0}:   []byte("one-zero"),
		{3, 200}: bytes.Repeat([]byte{7}, 300),
	}
	s := newSideServer(SideOptions{Now: func() float64 { return 42.25 }})
	for r, p := range payloads {
		s.SetPayload(r.PP, r.TP, p)
	}
	ts := EncodeTimestamp(42.25)
	f.Fuzz(func(t *testing.T, id, delim, req []byte, n uint8, command bool) {
		var frames [][]byte
		switch n % 6 {
		case 0:
		case 1:
			frames = [][]byte{id}
		case 2:
			frames = [][]byte{id, delim, req}
		case 3:
			frames = [][]byte{id, req}
		case 4:
			frames = [][]byte{id, delim, req, req}
		case 5:
			frames = [][]byte{id, delim, delim, req}
		}
		reply, err := s.answer(frames, command)
		var want []byte
		r, ok := SideRank{}, false
		if !command && len(frames) == 3 && len(frames[1]) == 0 && len(frames[2]) <= DefaultSideMaxRequest {
			r, ok = oracleRequest(frames[2])
		}
		if ok {
			want, ok = payloads[r]
		}
		if !ok {
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrSide))
			require.Nil(t, reply)
			return
		}
		require.NoError(t, err)
		require.Equal(t, [][]byte{id, {}, want, ts}, reply)
		pp, tp, err := DecodeMetaRequest(frames[2])
		require.NoError(t, err)
		require.Equal(t, r, SideRank{pp, tp})
	})
}

// fakeConn reads a fuzz input and discards what is written.
type fakeConn struct {
	net.Conn
	r io.Reader
}

func (c fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c fakeConn) SetDeadline(time.Time) error      { return nil }
func (c fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c fakeConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzSideStream feeds arbitrary bytes to what reads a peer's byte stream
// before zmq4 does: the prelude (greeting, READY), then the frame guard,
// which must find the same message ends and the same first bad header
// however the stream is split into reads, and never pass on a frame header
// over its limit.
func FuzzSideStream(f *testing.F) {
	ready := zmtpReplay("REQ", "")
	f.Add(append(append([]byte(nil), ready...), 1, 0, 0, 17), uint8(3))
	f.Add(append(append([]byte(nil), ready...), zmtpFlagLong, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), uint8(1))
	f.Add(append(append([]byte(nil), sideGreeting[:]...), 0x04, 0x0d, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c', 'k'), uint8(0))
	f.Add(append(append([]byte(nil), ready...), 0x01, 0x00, 0x04, 0x02, 0x01, 0x00, 0x80), uint8(5))
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		_, _ = zmtpParseReady(data)
		r := bytes.NewReader(data)
		if _, err := zmtpPrelude(fakeConn{r: r}, "ROUTER", func(string) bool { return true }); err != nil {
			return
		}
		rest := data[len(data)-r.Len():]
		const limit = 100
		ends := func(step int) (out []int, bad int) {
			g := zmtpGuard{maxFrame: limit}
			off := 0
			for off < len(rest) {
				b := rest[off:min(off+step, len(rest))]
				for len(b) > 0 {
					n, end, err := g.scan(b)
					if err != nil {
						return out, off
					}
					require.LessOrEqual(t, n, len(b))
					require.True(t, n > 0)
					off += n
					b = b[n:]
					if end {
						out = append(out, off)
					}
				}
			}
			return out, -1
		}
		ends1, bad1 := ends(len(rest) + 1)
		ends2, bad2 := ends(int(chunk%7) + 1)
		require.Equal(t, ends1, ends2)
		// Where the first bad header is reported depends on the split (the
		// read that completes it), whether it is does not.
		require.Equal(t, bad1 >= 0, bad2 >= 0, "bad1 %d bad2 %d", bad1, bad2)
		// Every frame the guard let through has a header within limits.
		last := 0
		if len(ends1) > 0 {
			last = ends1[len(ends1)-1]
		}
		for p := rest[:last]; len(p) > 0; {
			fl := p[0]
			require.Zero(t, fl&zmtpFlagReserved)
			var size uint64
			if fl&zmtpFlagLong != 0 {
				size = binary.BigEndian.Uint64(p[1:9])
				p = p[9:]
			} else {
				size = uint64(p[1])
				p = p[2:]
			}
			require.LessOrEqual(t, size, uint64(limit))
			p = p[size:]
		}
	})
}
