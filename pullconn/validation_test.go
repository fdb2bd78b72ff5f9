package pullconn

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Every bad argument to a constructor or method is refused with an error
// matching ErrInvalid (ErrClosed for a closed engine) whose text names the
// field and the expected value, changes nothing and never panics.
func TestBadArgumentsAreRefusedWithTheExactError(t *testing.T) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	defer fab.Close()
	agent := func(name string) nixl.Agent {
		a, err := fab.NewAgent(name)
		require.NoError(t, err)
		t.Cleanup(func() { a.Close() })
		return a
	}
	buf, err := nixl.AllocBuffer(layoutBytes(1, 16))
	require.NoError(t, err)
	defer buf.Free()
	goodEngine := func() EngineConfig {
		return EngineConfig{EngineID: "e", Model: "m", DType: "bfloat16", TPSize: 1, BlockSize: 16}
	}
	agents := map[string]nixl.Agent{}
	goodRank := func(name string) RankConfig {
		if agents[name] == nil {
			agents[name] = agent(name)
		}
		return RankConfig{Agent: agents[name], Layout: newLayout(buf, 0, 1, 16), StatsInterval: -1}
	}

	engineCases := map[string]func(*EngineConfig){
		"pullconn: invalid argument: EngineConfig.EngineID is empty":                          func(c *EngineConfig) { c.EngineID = "" },
		"pullconn: invalid argument: EngineConfig.Model is empty":                             func(c *EngineConfig) { c.Model = "" },
		"pullconn: invalid argument: EngineConfig.DType is empty":                             func(c *EngineConfig) { c.DType = "" },
		"pullconn: invalid argument: EngineConfig.TPSize is 0, want >= 1":                     func(c *EngineConfig) { c.TPSize = 0 },
		"pullconn: invalid argument: EngineConfig.BlockSize is -16, want >= 1":                func(c *EngineConfig) { c.BlockSize = -16 },
		"pullconn: invalid argument: EngineConfig.HandshakeTimeout is -1s, want > 0":          func(c *EngineConfig) { c.HandshakeTimeout = -time.Second },
		`pullconn: invalid argument: EngineConfig.KVLayout is "NHD": only "HND" is supported`: func(c *EngineConfig) { c.KVLayout = "NHD" },
	}
	for want, mutate := range engineCases {
		cfg := goodEngine()
		mutate(&cfg)
		e, err := NewEngine(cfg)
		assert.Nil(t, e)
		require.ErrorIs(t, err, ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}

	e, err := NewEngine(goodEngine())
	require.NoError(t, err)
	rankCases := map[string]func(*RankConfig){
		"pullconn: invalid argument: RankConfig.Agent is nil":                                                    func(c *RankConfig) { c.Agent = nil },
		"pullconn: invalid argument: RankConfig.Lease is -1s, want > 0":                                          func(c *RankConfig) { c.Lease = -time.Second },
		"pullconn: invalid argument: RankConfig.TransferTimeout is -1s, want > 0":                                func(c *RankConfig) { c.TransferTimeout = -time.Second },
		"pullconn: invalid argument: RankConfig.ExpiryMargin is -1s, want > 0":                                   func(c *RankConfig) { c.ExpiryMargin = -time.Second },
		"pullconn: invalid argument: RankConfig.KeepAliveTimeout is -1s, want > 0":                               func(c *RankConfig) { c.KeepAliveTimeout = -time.Second },
		"pullconn: invalid argument: RankConfig.HeartbeatInterval 40s must be shorter than RankConfig.Lease 30s": func(c *RankConfig) { c.HeartbeatInterval = 40 * time.Second },
		"pullconn: invalid argument: RankConfig.HeartbeatExtension is -1s, want > 0":                             func(c *RankConfig) { c.HeartbeatExtension = -time.Second },
		`pullconn: invalid argument: RankConfig.FailurePolicy is "retry", want "fail" or "recompute"`:            func(c *RankConfig) { c.FailurePolicy = "retry" },
		`pullconn: invalid argument: RankConfig.Layout.TPSize is 2, engine "e" has TP size 1`:                    func(c *RankConfig) { c.Layout.TPSize = 2 },
		`pullconn: invalid argument: RankConfig.Layout.BlockSize is 32, engine "e" has block size 16`:            func(c *RankConfig) { c.Layout.BlockSize = 32 },
		`pullconn: invalid argument: RankConfig.Layout.DType is "float16", engine "e" has dtype "bfloat16"`:      func(c *RankConfig) { c.Layout.DType = "float16" },
	}
	for want, mutate := range rankCases {
		cfg := goodRank("bad")
		mutate(&cfg)
		p, err := NewProducer(e, cfg)
		assert.Nil(t, p)
		require.ErrorIs(t, err, ErrInvalid, want)
		assert.Equal(t, want, err.Error())
		c, err := NewConsumer(e, cfg)
		assert.Nil(t, c)
		require.ErrorIs(t, err, ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}

	_, err = NewProducer(nil, goodRank("nil-e"))
	assert.EqualError(t, err, "pullconn: invalid argument: engine is nil: create it with NewEngine")
	_, err = NewConsumer(nil, goodRank("nil-e2"))
	assert.EqualError(t, err, "pullconn: invalid argument: engine is nil: create it with NewEngine")

	p, err := NewProducer(e, goodRank("p0"))
	require.NoError(t, err)
	_, err = NewProducer(e, goodRank("p0b"))
	require.ErrorIs(t, err, ErrInvalid)
	assert.EqualError(t, err, `pullconn: invalid argument: engine "e" already has a Producer for TP rank 0`)
	c, err := NewConsumer(e, goodRank("c0"))
	require.NoError(t, err, "a Producer and a Consumer of one rank (kv_both)")
	_, err = NewConsumer(e, goodRank("c0b"))
	assert.EqualError(t, err, `pullconn: invalid argument: engine "e" already has a rank 0: close it first`)
	require.NoError(t, c.Close())

	requestCases := map[string]func() error{
		`pullconn: invalid argument: request id "": want 1..1024 bytes without ','`:        func() error { _, err := p.RequestFinished("", nil); return err },
		`pullconn: invalid argument: request id "a,b": want 1..1024 bytes without ','`:     func() error { _, err := p.RequestFinished("a,b", nil); return err },
		`pullconn: invalid argument: request "r": blockIDs[1] is 64, layout has 64 blocks`: func() error { _, err := p.RequestFinished("r", []int{1, 64}); return err },
		`pullconn: invalid argument: request id "` + strings.Repeat("x", 1025) + `": want 1..1024 bytes without ','`: func() error {
			_, err := p.RequestFinished(strings.Repeat("x", 1025), nil)
			return err
		},
	}
	for want, call := range requestCases {
		err := call()
		require.ErrorIs(t, err, ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}
	assert.Equal(t, 0, p.Held(), "nothing held by refused calls")
	params, err := p.RequestFinished("r", []int{1})
	require.NoError(t, err)
	_, err = p.RequestFinished("r", []int{2})
	assert.EqualError(t, err, `pullconn: invalid argument: request "r" is already held`)
	require.NoError(t, p.Close())

	de, err := NewEngine(EngineConfig{EngineID: "d", Model: "m", DType: "bfloat16", TPSize: 1, BlockSize: 16})
	require.NoError(t, err)
	defer de.Close()
	cn, err := NewConsumer(de, goodRank("d0"))
	require.NoError(t, err)
	defer cn.Close()
	bad := func(f func(*Params)) Params {
		q := params
		q.RemoteBlockIDs = append([]int(nil), params.RemoteBlockIDs...)
		f(&q)
		return q
	}
	loadCases := map[string]func() error{
		"pullconn: invalid argument: request id is empty": func() error { return cn.Load("", params, []int{1}) },
		"pullconn: invalid argument: Params.DoRemotePrefill is false: the request was not prefilled remotely": func() error {
			return cn.Load("x", bad(func(q *Params) { q.DoRemotePrefill = false }), nil)
		},
		"pullconn: invalid argument: Params.RemoteEngineID is empty": func() error {
			return cn.Load("x", bad(func(q *Params) { q.RemoteEngineID = "" }), nil)
		},
		"pullconn: invalid argument: Params.RemotePort is 0, want 1..65535": func() error {
			return cn.Load("x", bad(func(q *Params) { q.RemotePort = 0 }), nil)
		},
		"pullconn: invalid argument: Params.PPSize is 2: the pull connector supports prefill PP size 1 only": func() error {
			return cn.Load("x", bad(func(q *Params) { q.PPSize = 2 }), nil)
		},
		"pullconn: invalid argument: Params.RemoteBlockIDs[0] is -1, want 0..1073741824": func() error {
			return cn.Load("x", bad(func(q *Params) { q.RemoteBlockIDs[0] = -1 }), nil)
		},
		"pullconn: invalid argument: Params.RemoteBlocksExpiryTime is -1, want seconds since the Unix epoch (0 for none)": func() error {
			return cn.Load("x", bad(func(q *Params) { q.RemoteBlocksExpiryTime = -1 }), nil)
		},
		`pullconn: invalid argument: request "x": localBlocks[0] is 99, layout has 64 blocks`: func() error { return cn.Load("x", params, []int{99}) },
		"pullconn: invalid argument: Params.TPSize is 0, want >= 1": func() error {
			return cn.KeepAlive("x", bad(func(q *Params) { q.TPSize = 0 }))
		},
	}
	for want, call := range loadCases {
		err := call()
		require.ErrorIs(t, err, ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}
	assert.Equal(t, 0, cn.Pending(), "nothing loading after refused calls")
	n, _ := cn.Stats().Get("rejected_loads")
	assert.Equal(t, uint64(len(loadCases)), n, "every refusal counted")

	require.NoError(t, e.Close())
	_, err = NewProducer(e, goodRank("late"))
	require.ErrorIs(t, err, ErrClosed)
	assert.EqualError(t, err, `pullconn: connector closed: engine "e" was closed`)
}

// Errors name the public package and no internal one: a handshake with an
// address where nothing listens says what failed in pullconn's words.
func TestHandshakeErrorTextNamesNoInternalPackage(t *testing.T) {
	c := newCluster(t, clusterOpts{decodeEngine: func(e *EngineConfig) { e.HandshakeTimeout = 200 * time.Millisecond }})
	p := c.finish("req-1", []int{1})
	p.RemotePort = 1 // nothing listens there
	c.load("dreq-1", p, []int{2})
	err := c.result("dreq-1")[0].Err
	require.ErrorIs(t, err, ErrHandshake)
	assert.True(t, strings.HasPrefix(err.Error(), `pullconn: handshake failed: engine "prefill" at 127.0.0.1:1: `), err.Error())
	assert.NotContains(t, err.Error(), "sidechannel")
	assert.NotContains(t, err.Error(), "handshake: ")
}
