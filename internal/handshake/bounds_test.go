package handshake

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/internal/sidechannel"
	"github.com/gonixl/gonixl/internal/staging"
)

// replyWith encodes a Reply whose payload is the map fields writes.
func replyWith(t *testing.T, fields func(e *msgpack.Encoder)) []byte {
	t.Helper()
	var b bytes.Buffer
	e := msgpack.NewEncoder(&b)
	require.NoError(t, e.EncodeMapLen(1))
	require.NoError(t, e.EncodeString("payload"))
	fields(e)
	return b.Bytes()
}

func nils(e *msgpack.Encoder, n int) {
	_ = e.EncodeArrayLen(n)
	for range n {
		_ = e.EncodeNil()
	}
}

// allocated returns the bytes allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Defect 9 of the correctness issue: a reply whose arrays claim many nil
// elements cost about 350x its size to decode (a 16 MiB reply, 5.6 GiB).
func TestReplyDecodingIsBoundedByItsSize(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		body       func(e *msgpack.Encoder)
	}{
		{"ranks over the limit", "payload lists 1048576 ranks, limit 1024", func(e *msgpack.Encoder) {
			_ = e.EncodeMapLen(1)
			_ = e.EncodeString("ranks")
			nils(e, 1<<20)
		}},
		{"nil ranks", "payload ranks[0] is not a map", func(e *msgpack.Encoder) {
			_ = e.EncodeMapLen(1)
			_ = e.EncodeString("ranks")
			nils(e, 1000)
		}},
		{"regions over the limit", "layout lists 1048576 regions, limit 32768", func(e *msgpack.Encoder) {
			_ = e.EncodeMapLen(1)
			_ = e.EncodeString("ranks")
			_ = e.EncodeArrayLen(1)
			_ = e.EncodeMapLen(1)
			_ = e.EncodeString("layout")
			_ = e.EncodeMapLen(1)
			_ = e.EncodeString("regions")
			nils(e, 1<<20)
		}},
		{"nil regions", "layout regions[0] lacks base or dev_id", func(e *msgpack.Encoder) {
			_ = e.EncodeMapLen(1)
			_ = e.EncodeString("ranks")
			_ = e.EncodeArrayLen(1)
			_ = e.EncodeMapLen(1)
			_ = e.EncodeString("layout")
			_ = e.EncodeMapLen(1)
			_ = e.EncodeString("regions")
			nils(e, 30000)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := replyWith(t, tc.body)
			var err error
			n := allocated(func() {
				var r Reply
				err = sidechannel.Decode(body, &r)
			})
			require.ErrorIs(t, err, sidechannel.ErrMalformed)
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, n, uint64(4*len(body)+64<<10), "decoding %d bytes allocated %d", len(body), n)
		})
	}
}

func TestPayloadRoundTripsThroughTheBoundedDecoders(t *testing.T) {
	p := Payload{EngineID: "e", Compat: compat(ModePull), Hash: compat(ModePull).Hash(), TPSize: 2, PPSize: 1, BlockSize: 16,
		Ranks: RankList{rank(0, 2, 16), rank(1, 2, 16)}}
	p.Ranks[1].Layout.Regions[1].DevID = 3
	body, err := sidechannel.Encode(Reply{Payload: &p, Now: 5})
	require.NoError(t, err)
	var r Reply
	require.NoError(t, sidechannel.Decode(body, &r))
	require.NotNil(t, r.Payload)
	assert.Equal(t, p, *r.Payload)
	require.NoError(t, r.Payload.Validate())
}

// The reply carries the server's clock; the client turns it into an offset
// estimate with the round trip as its uncertainty.
func TestClientEstimatesClockOffset(t *testing.T) {
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	s, err := Serve("127.0.0.1:0", engine(1), ServerOptions{Now: ahead})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.SetRank(rank(0, 1, 16)))
	c, err := NewClient("decode-e", compat(ModePull), time.Second, 0)
	require.NoError(t, err)
	p, err := c.Get(context.Background(), "prefill-e", s.Addr().String())
	require.NoError(t, err)
	assert.InDelta(t, float64(time.Hour), float64(p.ClockOffset), float64(p.ClockUncertainty+time.Millisecond))
	assert.Less(t, p.ClockUncertainty, time.Second)
}

func TestHoldQuery(t *testing.T) {
	ahead := func() time.Time { return time.Unix(0, 0).Add(time.Hour) }
	var asked []string
	var reader, agent string
	s, err := Serve("127.0.0.1:0", engine(1), ServerOptions{Now: ahead, OnExtend: func(r, a string, ids []string) []int64 {
		asked, reader, agent = ids, r, a
		return []int64{time.Unix(0, 0).Add(time.Hour + 30*time.Second).UnixNano(), 0}
	}})
	require.NoError(t, err)
	defer s.Close()
	c, err := NewClient("decode-e", compat(ModePull), time.Second, 0)
	require.NoError(t, err)
	before := time.Now()
	ds, clk, err := c.Extend(context.Background(), "prefill-e", s.Addr().String(), "decode-e-0", []string{"a", "b"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, asked)
	assert.Equal(t, "decode-e", reader)
	assert.Equal(t, "decode-e-0", agent)
	// The exchange measures the offset afresh: the server is an hour ahead.
	assert.InDelta(t, float64(time.Hour)-float64(time.Since(time.Unix(0, 0))), float64(clk.Offset), float64(clk.Uncertainty+time.Second))
	require.Len(t, ds, 2)
	// 30 s after the server's now, counted from before the query left.
	assert.False(t, ds[0].Before(before.Add(30*time.Second)))
	assert.True(t, ds[0].Before(time.Now().Add(30*time.Second)))
	assert.True(t, ds[1].IsZero(), "not held")

	plain, err := Serve("127.0.0.1:0", engine(1), ServerOptions{})
	require.NoError(t, err)
	defer plain.Close()
	_, _, err = c.Extend(context.Background(), "prefill-e", plain.Addr().String(), "decode-e-0", []string{"a"})
	require.ErrorIs(t, err, ErrFailed)
	assert.Contains(t, err.Error(), `engine "prefill-e" holds no blocks for peers (not a pull prefill engine)`)
}

// TestConfirmationCountsBoundedBeforeAllocating: a hold list or rank list
// whose header claims more entries than the limits is refused by its count,
// so a few bytes cannot make the server allocate per claimed entry.
func TestConfirmationCountsBoundedBeforeAllocating(t *testing.T) {
	for _, tc := range []struct {
		name string
		list []byte
		want string
	}{
		{"holds", []byte{0xdd, 0x00, 0x10, 0x00, 0x00}, "confirmation lists 1048576 holds, limit 512"},
		{"ranks", []byte{0x91, 0x81, 0xa5, 'r', 'a', 'n', 'k', 's', 0xdd, 0x00, 0x10, 0x00, 0x00}, "hold names 1048576 ranks, limit 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := append([]byte{0x81, 0xa7, 'c', 'o', 'n', 'f', 'i', 'r', 'm'}, tc.list...)
			body = append(body, make([]byte, 1<<20)...) // enough bytes for the shape check
			var h Hello
			err := sidechannel.Decode(body, &h)
			require.ErrorIs(t, err, sidechannel.ErrMalformed)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestConfirmation: the verdicts come back in order for the asking engine
// and agent; malformed holds are refused naming what was wrong, before the
// engine sees them; an engine that confirms nothing says so.
func TestConfirmation(t *testing.T) {
	var got []HoldRef
	var reader, agent string
	s, err := Serve("127.0.0.1:0", engine(2), ServerOptions{OnConfirm: func(r, a string, refs []HoldRef) []string {
		got, reader, agent = refs, r, a
		return []string{"", "it holds no such request"}
	}})
	require.NoError(t, err)
	defer s.Close()
	c, err := NewClient("decode-e", compat(ModePull), time.Second, 0)
	require.NoError(t, err)
	refs := []HoldRef{{ID: "a", Key: 7, N: 1, Ranks: []int{0, 1}, PinMicros: 1}, {ID: "b", Key: 9, N: 1, Ranks: []int{1}, PinMicros: 30e6}}
	why, _, err := c.Confirm(context.Background(), "prefill-e", s.Addr().String(), "decode-e-0", refs)
	require.NoError(t, err)
	assert.Equal(t, []string{"", "it holds no such request"}, why)
	assert.Equal(t, refs, got)
	assert.Equal(t, "decode-e", reader)
	assert.Equal(t, "decode-e-0", agent)

	got = nil
	for _, tc := range []struct {
		ref  HoldRef
		want string
	}{
		{HoldRef{ID: "", N: 1, Ranks: []int{0}, PinMicros: 1}, "confirmation hold 0: id is 0 bytes, want 1..1024"},
		{HoldRef{ID: "a", N: 0, Ranks: []int{0}, PinMicros: 1}, "confirmation hold 0: decode world size 0 outside [1, 65536]"},
		{HoldRef{ID: "a", N: 1, Ranks: []int{0}}, "confirmation hold 0: pin of 0 us, want >= 1"},
		{HoldRef{ID: "a", N: 1, PinMicros: 1}, "confirmation hold 0: names 0 prefill ranks, engine has 2"},
		{HoldRef{ID: "a", N: 1, Ranks: []int{0, 0}, PinMicros: 1}, "confirmation hold 0: prefill rank 0 is out of range 0..1 or named twice"},
		{HoldRef{ID: "a", N: 1, Ranks: []int{2}, PinMicros: 1}, "confirmation hold 0: prefill rank 2 is out of range 0..1 or named twice"},
	} {
		_, _, err := c.Confirm(context.Background(), "prefill-e", s.Addr().String(), "decode-e-0", []HoldRef{tc.ref})
		require.ErrorIs(t, err, ErrFailed)
		assert.Contains(t, err.Error(), tc.want)
	}
	many := make([]HoldRef, MaxConfirmHolds+1)
	for i := range many {
		many[i] = HoldRef{ID: "a", N: 1, Ranks: []int{0}}
	}
	_, _, err = c.Confirm(context.Background(), "prefill-e", s.Addr().String(), "decode-e-0", many)
	// Refused by its count as the frame is decoded: the server closes the
	// connection (a malformed frame) without reading on.
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorContains(t, err, "the server closed the connection without replying")
	_, _, err = c.Confirm(context.Background(), "prefill-e", s.Addr().String(), "", refs)
	require.ErrorContains(t, err, "confirmation names an agent of 0 bytes")
	assert.Nil(t, got, "nothing malformed reached the engine")

	plain, err := Serve("127.0.0.1:0", engine(1), ServerOptions{})
	require.NoError(t, err)
	defer plain.Close()
	_, _, err = c.Confirm(context.Background(), "prefill-e", plain.Addr().String(), "decode-e-0", refs[:1])
	require.ErrorContains(t, err, `engine "prefill-e" confirms no holds (not a pull prefill engine)`)
}

// TestPayloadStagingChecked: a rank's advertised staging memory must be
// slots inside the address space, or the payload is refused naming it.
func TestPayloadStagingChecked(t *testing.T) {
	p := Payload{EngineID: "e", Compat: compat(ModePull), Hash: compat(ModePull).Hash(), TPSize: 1, PPSize: 1, BlockSize: 16, Ranks: RankList{rank(0, 1, 16)}}
	p.Ranks[0].Staging = &staging.Info{Base: 1 << 30, SlotBytes: 1 << 20, Slots: 4}
	require.NoError(t, p.Validate())
	for _, bad := range []staging.Info{
		{Base: 1, SlotBytes: 1 << 20, Slots: 0},
		{Base: 1, SlotBytes: 0, Slots: 1},
		{Base: 1, SlotBytes: 1 << 20, Slots: staging.MaxSlots + 1},
		{Base: ^uint64(0) - 10, SlotBytes: 1 << 20, Slots: 1},
	} {
		p.Ranks[0].Staging = &bad
		err := p.Validate()
		require.Error(t, err, "%+v", bad)
		require.Contains(t, err.Error(), "ranks[0].staging")
	}
}

// FuzzReplyFrame decodes arbitrary bytes as the reply a client receives:
// errors matching ErrMalformed, never a panic, and what decodes validates
// or is refused by Validate.
func FuzzReplyFrame(f *testing.F) {
	p := Payload{EngineID: "e", Compat: compat(ModePull), Hash: compat(ModePull).Hash(), TPSize: 1, PPSize: 1, BlockSize: 16, Ranks: RankList{rank(0, 1, 16)}}
	good, _ := sidechannel.Encode(Reply{Compat: p.Compat, Hash: p.Hash, Payload: &p, Now: 1})
	f.Add(good)
	staged := p
	staged.Ranks = RankList{rank(0, 1, 16)}
	staged.Ranks[0].Staging = &staging.Info{Base: 1 << 30, SlotBytes: 1 << 20, Slots: 4}
	if b, err := sidechannel.Encode(Reply{Compat: p.Compat, Hash: p.Hash, Payload: &staged, Now: 1}); err == nil {
		f.Add(b)
	}
	f.Add([]byte{0x81, 0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd', 0x81, 0xa5, 'r', 'a', 'n', 'k', 's', 0xdd, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, body []byte) {
		var r Reply
		if err := sidechannel.Decode(body, &r); err != nil {
			if !errors.Is(err, sidechannel.ErrMalformed) {
				t.Fatal(err)
			}
			return
		}
		if r.Payload != nil {
			_ = r.Payload.Validate()
		}
	})
}
