package handshake

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/sidechannel"
	"github.com/gonixl/gonixl/nixl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func compat(mode string) Compat {
	return Compat{Version: Version, Model: "llama-3-8b", DType: "bfloat16", Layout: "HND", Mode: mode}
}

func layout(rank, tp, blockTokens int) descriptors.Layout {
	l := descriptors.Layout{
		Mem: nixl.DRAM, NumLayers: 2, NumBlocks: 8, BlockSize: blockTokens,
		KVHeads: 4 / tp, HeadBytes: 16, DType: "bfloat16", TPRank: rank, TPSize: tp,
	}
	base := uint64(0x10000)
	for i := 0; i < l.NumRegions(); i++ {
		l.Regions = append(l.Regions, descriptors.Region{Base: base})
		base += l.RegionLen()
	}
	return l
}

func rank(i, tp, bs int) Rank {
	return Rank{TPRank: i, Agent: "prefill-" + string(rune('0'+i)), Metadata: []byte{1, 2, 3}, Layout: layout(i, tp, bs)}
}

func TestCheck(t *testing.T) {
	require.NoError(t, Check(compat(ModePull), compat(ModePull), compat(ModePull).Hash()))
	err := Check(compat(ModePull), compat(ModePush), compat(ModePush).Hash())
	assert.ErrorIs(t, err, ErrIncompatible)
	assert.EqualError(t, err, `incompatible engines: transfer mode mismatch: local "pull", remote "push"`)

	other := compat(ModePull)
	other.Model = "qwen3-32b"
	assert.ErrorContains(t, Check(compat(ModePull), other, other.Hash()), `model mismatch: local "llama-3-8b", remote "qwen3-32b"`)
	other = compat(ModePull)
	other.DType = "float8_e4m3fn"
	assert.ErrorContains(t, Check(compat(ModePull), other, other.Hash()), `kv dtype mismatch: local "bfloat16", remote "float8_e4m3fn"`)
	other = compat(ModePull)
	other.Layout = "MLA"
	assert.ErrorContains(t, Check(compat(ModePull), other, other.Hash()), `kv layout mismatch: local "HND", remote "MLA"`)
	other = compat(ModePull)
	other.Version = 9
	assert.ErrorContains(t, Check(compat(ModePull), other, ""), "protocol version mismatch: local 1, remote 9")
	err = Check(compat(ModePull), compat(ModePull), "feedface")
	assert.ErrorContains(t, err, `compatibility hash mismatch: local "`+compat(ModePull).Hash()+`", remote "feedface"`)
}

func TestHashDependsOnEveryField(t *testing.T) {
	base := compat(ModePull)
	seen := map[string]bool{base.Hash(): true}
	for _, c := range []Compat{
		{Version: 2, Model: base.Model, DType: base.DType, Layout: base.Layout, Mode: base.Mode},
		{Version: 1, Model: "m2", DType: base.DType, Layout: base.Layout, Mode: base.Mode},
		{Version: 1, Model: base.Model, DType: "fp8", Layout: base.Layout, Mode: base.Mode},
		{Version: 1, Model: base.Model, DType: base.DType, Layout: "MLA", Mode: base.Mode},
		{Version: 1, Model: base.Model, DType: base.DType, Layout: base.Layout, Mode: ModePush},
	} {
		h := c.Hash()
		assert.Len(t, h, 32)
		assert.False(t, seen[h], "hash collision for %+v", c)
		seen[h] = true
	}
	assert.Equal(t, base.Hash(), compat(ModePull).Hash(), "deterministic")
}

func TestCompatValidate(t *testing.T) {
	c := compat("pul")
	assert.EqualError(t, c.Validate(), `compat mode is "pul", want "pull" or "push"`)
	c = compat(ModePull)
	c.Model = ""
	assert.EqualError(t, c.Validate(), "compat model is empty")
}

func engine(tp int) Engine {
	return Engine{EngineID: "prefill-e", Compat: compat(ModePull), TPSize: tp, PPSize: 1, BlockSize: 16}
}

func serve(t *testing.T, e Engine, opts ServerOptions) *Server {
	t.Helper()
	s, err := Serve("127.0.0.1:0", e, opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func client(t *testing.T, mode string, timeout time.Duration) *Client {
	t.Helper()
	c, err := NewClient("decode-e", compat(mode), timeout, 0)
	require.NoError(t, err)
	return c
}

func TestFetchPayload(t *testing.T) {
	s := serve(t, engine(2), ServerOptions{})
	require.NoError(t, s.SetRank(rank(0, 2, 16)))
	require.NoError(t, s.SetRank(rank(1, 2, 16)))
	c := client(t, ModePull, 5*time.Second)
	p, err := c.Get(context.Background(), "prefill-e", s.Addr().String())
	require.NoError(t, err)
	assert.Equal(t, "prefill-e", p.EngineID)
	assert.Equal(t, 2, p.TPSize)
	require.Len(t, p.Ranks, 2)
	assert.Equal(t, rank(1, 2, 16), p.Ranks[1])
	again, ok := c.Peek("prefill-e", s.Addr().String())
	assert.True(t, ok)
	assert.Same(t, p, again)
}

func TestSetRankRejects(t *testing.T) {
	s := serve(t, engine(2), ServerOptions{})
	assert.EqualError(t, s.SetRank(rank(2, 2, 16)), "rank 2 outside engine tp size 2")
	assert.EqualError(t, s.SetRank(rank(0, 2, 32)), "rank 0 layout block_size is 32, engine block size is 16")
	r := rank(0, 2, 16)
	r.Layout.TPSize = 4
	assert.EqualError(t, s.SetRank(r), "rank 0 layout says rank 0 of 4, engine tp size is 2")
	require.NoError(t, s.SetRank(rank(0, 2, 16)))
	assert.EqualError(t, s.SetRank(rank(0, 2, 16)), "rank 0 is already set")
}

func TestMismatchedModeRefusedBothWays(t *testing.T) {
	var refused atomic.Int64
	s := serve(t, engine(1), ServerOptions{OnRefused: func(error) { refused.Add(1) }})
	require.NoError(t, s.SetRank(rank(0, 1, 16)))
	c := client(t, ModePush, 5*time.Second)
	_, err := c.Get(context.Background(), "prefill-e", s.Addr().String())
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrIncompatible)
	assert.Contains(t, err.Error(), `transfer mode mismatch: local "push", remote "pull"`)
	assert.Equal(t, int64(1), refused.Load(), "the server counts its refusal")
	_, ok := c.Peek("prefill-e", s.Addr().String())
	assert.False(t, ok, "a refusal is not cached")
}

func TestNotReadyRetriesUntilReady(t *testing.T) {
	s := serve(t, engine(2), ServerOptions{})
	require.NoError(t, s.SetRank(rank(0, 2, 16)))
	time.AfterFunc(50*time.Millisecond, func() { s.SetRank(rank(1, 2, 16)) })
	c := client(t, ModePull, 5*time.Second)
	p, err := c.Get(context.Background(), "prefill-e", s.Addr().String())
	require.NoError(t, err)
	assert.Len(t, p.Ranks, 2)
}

func TestNotReadyGivesUpAtDeadline(t *testing.T) {
	// The fetch's deadline passes once the engine has answered "not
	// ready" twice (the test cancels the fetch's context then, standing in
	// for its timer): the client retries only after it read the first
	// answer, so it has heard one whatever the machine's speed (a 1 s
	// deadline once passed before the first answer came back on a loaded
	// machine). The deadline may cut an attempt's dial or read: the error
	// still names what the engine said.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var replies atomic.Int64
	s := serve(t, engine(2), ServerOptions{Now: func() time.Time {
		if replies.Add(1) == 2 {
			cancel()
		}
		return time.Now()
	}})
	require.NoError(t, s.SetRank(rank(0, 2, 16)))
	c := client(t, ModePull, time.Minute) // bounds a hang only
	_, err := c.fetch(ctx, "prefill-e", s.Addr().String())
	assert.ErrorIs(t, err, ErrFailed)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, `engine "prefill-e" is not ready: rank 1 has not started`)
}

func TestWrongEngineAtAddress(t *testing.T) {
	s := serve(t, engine(1), ServerOptions{})
	require.NoError(t, s.SetRank(rank(0, 1, 16)))
	c := client(t, ModePull, time.Second)
	_, err := c.Get(context.Background(), "someone-else", s.Addr().String())
	assert.ErrorIs(t, err, ErrFailed)
	assert.ErrorContains(t, err, `serves engine "prefill-e", expected engine "someone-else"`)
}

func TestDeadAddressFailsWithinDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	c := client(t, ModePull, 200*time.Millisecond)
	start := time.Now()
	_, err = c.Get(context.Background(), "prefill-e", addr)
	assert.ErrorIs(t, err, ErrFailed)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestOneHandshakeInFlightPerEngine(t *testing.T) {
	var calls atomic.Int64
	s := serve(t, engine(1), ServerOptions{})
	require.NoError(t, s.SetRank(rank(0, 1, 16)))
	// Count connections with a proxy listener in front of the server.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			calls.Add(1)
			up, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				c.Close()
				continue
			}
			pwg.Add(2)
			go func() { defer pwg.Done(); copyClose(up, c) }()
			go func() { defer pwg.Done(); copyClose(c, up) }()
		}
	}()
	defer func() { ln.Close(); pwg.Wait() }()
	c := client(t, ModePull, 5*time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Get(context.Background(), "prefill-e", ln.Addr().String())
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(1), calls.Load())
	c.Forget("prefill-e", ln.Addr().String())
	_, err = c.Get(context.Background(), "prefill-e", ln.Addr().String())
	require.NoError(t, err)
	assert.Equal(t, int64(2), calls.Load(), "Forget makes the next Get handshake again")
}

func copyClose(dst, src net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func TestPayloadValidate(t *testing.T) {
	good := Payload{EngineID: "e", Compat: compat(ModePull), TPSize: 1, PPSize: 1, BlockSize: 16, Ranks: []Rank{rank(0, 1, 16)}}
	require.NoError(t, good.Validate())
	for want, mutate := range map[string]func(p *Payload){
		"engine_id is empty":                                 func(p *Payload) { p.EngineID = "" },
		"has 0 ranks, tp_size is 1":                          func(p *Payload) { p.Ranks = nil },
		"ranks[0].metadata is empty":                         func(p *Payload) { p.Ranks[0].Metadata = nil },
		"ranks[0].layout.block_size is 16, block_size is 32": func(p *Payload) { p.BlockSize = 32 },
		"ranks[0].layout: descriptors":                       func(p *Payload) { p.Ranks[0].Layout.HeadBytes = 0 },
	} {
		p := good
		p.Ranks = []Rank{rank(0, 1, 16)}
		mutate(&p)
		err := p.Validate()
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
}

// FuzzHelloFrame decodes arbitrary bytes as the hello a server receives and
// runs the server's answer on whatever decodes: errors, never panics.
func FuzzHelloFrame(f *testing.F) {
	good, _ := sidechannel.Encode(Hello{EngineID: "d", Compat: compat(ModePull), Hash: compat(ModePull).Hash()})
	f.Add(good)
	f.Add([]byte{0x80})
	f.Add([]byte{0x81, 0xa6, 'c', 'o', 'm', 'p', 'a', 't', 0xc0})
	conf, _ := sidechannel.Encode(Hello{EngineID: "d", Compat: compat(ModePull), Hash: compat(ModePull).Hash(), Agent: "d-0",
		Confirm: HoldRefs{{ID: "r", Key: 9, N: 2, Ranks: RankNumbers{0}}}})
	f.Add(conf)
	ready, _ := sidechannel.Encode(Hello{EngineID: "d", Compat: compat(ModePull), Hash: compat(ModePull).Hash(), Agent: "d-0",
		Ready: &ReadyQuery{ID: "r", Key: 9, Ranks: RankNumbers{0}, Known: ReadyStates{1}, WaitMicros: 10}})
	f.Add(ready)
	s := &Server{engine: engine(1), hash: compat(ModePull).Hash(), ranks: make([]*Rank, 1),
		onConfirm: func(_, _ string, refs []HoldRef) []string { return make([]string, len(refs)) },
		onReady:   func(_, _ string, q ReadyQuery) []int64 { return make([]int64, len(q.Ranks)) }}
	f.Fuzz(func(t *testing.T, body []byte) {
		var h Hello
		if err := sidechannel.Decode(body, &h); err != nil {
			if !errors.Is(err, sidechannel.ErrMalformed) {
				t.Fatal(err)
			}
			return
		}
		r := s.answer(h)
		if r.Payload != nil {
			t.Fatalf("not-ready server gave a payload to %+v", h)
		}
	})
}
