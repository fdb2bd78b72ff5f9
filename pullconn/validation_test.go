package pullconn

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Every bad argument to a constructor or method is refused with an error
// matching connector.ErrInvalid (connector.ErrClosed for a closed engine) whose text names the
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
	goodEngine := func() connector.EngineConfig {
		return connector.EngineConfig{EngineID: "e", Model: "m", Geometry: testGeometry(1, 16)}
	}
	agents := map[string]nixl.Agent{}
	goodRank := func(name string) Config {
		if agents[name] == nil {
			agents[name] = agent(name)
		}
		return Config{RankConfig: connector.RankConfig{Agent: agents[name], Layout: newLayout(buf, 0, 1, 16), StatsInterval: -1}}
	}

	engineCases := map[string]func(*connector.EngineConfig){
		"pullconn: invalid argument: EngineConfig.EngineID is empty":                                                                                                                       func(c *connector.EngineConfig) { c.EngineID = "" },
		"pullconn: invalid argument: EngineConfig.Model is empty":                                                                                                                          func(c *connector.EngineConfig) { c.Model = "" },
		`pullconn: invalid argument: EngineConfig.Geometry.DType is empty, want an element type name such as "bfloat16"`:                                                                   func(c *connector.EngineConfig) { c.Geometry.DType = "" },
		"pullconn: invalid argument: EngineConfig.Geometry.TPSize is 0, want >= 1":                                                                                                         func(c *connector.EngineConfig) { c.Geometry.TPSize = 0 },
		"pullconn: invalid argument: EngineConfig.Geometry.BlockSize is -16, want >= 1":                                                                                                    func(c *connector.EngineConfig) { c.Geometry.BlockSize = -16 },
		"pullconn: invalid argument: EngineConfig.HandshakeTimeout is -1s, want > 0":                                                                                                       func(c *connector.EngineConfig) { c.HandshakeTimeout = -time.Second },
		`pullconn: invalid argument: EngineConfig.KVLayout is "NHD": only "HND" is supported (token-major NHD blocks are Geometry.Order = descriptors.OrderNHD, with KVLayout left "HND")`: func(c *connector.EngineConfig) { c.KVLayout = "NHD" },
	}
	for want, mutate := range engineCases {
		cfg := goodEngine()
		mutate(&cfg)
		e, err := NewEngine(cfg)
		assert.Nil(t, e)
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}

	e, err := NewEngine(goodEngine())
	require.NoError(t, err)
	rankCases := map[string]func(*Config){
		"pullconn: invalid argument: RankConfig.Agent is nil":                                                         func(c *Config) { c.Agent = nil },
		"pullconn: invalid argument: RankConfig.Lease is -1s, want > 0":                                               func(c *Config) { c.Lease = -time.Second },
		"pullconn: invalid argument: Config.TransferTimeout is -1s, want > 0":                                         func(c *Config) { c.TransferTimeout = -time.Second },
		"pullconn: invalid argument: Config.ExpiryMargin is -1s, want > 0":                                            func(c *Config) { c.ExpiryMargin = -time.Second },
		"pullconn: invalid argument: Config.KeepAliveTimeout is -1s, want > 0":                                        func(c *Config) { c.KeepAliveTimeout = -time.Second },
		"pullconn: invalid argument: Config.HeartbeatInterval 40s must be shorter than RankConfig.Lease 30s":          func(c *Config) { c.HeartbeatInterval = 40 * time.Second },
		"pullconn: invalid argument: Config.HeartbeatExtension is -1s, want > 0":                                      func(c *Config) { c.HeartbeatExtension = -time.Second },
		`pullconn: invalid argument: RankConfig.FailurePolicy is "retry", want "fail" or "recompute"`:                 func(c *Config) { c.FailurePolicy = "retry" },
		`pullconn: invalid argument: RankConfig.Layout.TPSize is 2, engine "e" has TP size 1`:                         func(c *Config) { c.Layout.TPSize = 2 },
		`pullconn: invalid argument: RankConfig.Layout.BlockSize is 32, engine "e" has block size 16`:                 func(c *Config) { c.Layout.BlockSize = 32 },
		`pullconn: invalid argument: RankConfig.Layout.DType is "float16", the geometry's is "bfloat16" (engine "e")`: func(c *Config) { c.Layout.DType = "float16" },
	}
	for want, mutate := range rankCases {
		cfg := goodRank("bad")
		mutate(&cfg)
		wantP, wantC := sideErrors(want)
		p, err := NewProducer(e, cfg)
		assert.Nil(t, p)
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Equal(t, wantP, err.Error())
		c, err := NewConsumer(e, cfg)
		assert.Nil(t, c)
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Equal(t, wantC, err.Error())
	}

	_, err = NewProducer(nil, goodRank("nil-e"))
	assert.EqualError(t, err, "pullconn: invalid argument: engine is nil: create it with pullconn.NewEngine")
	_, err = NewConsumer(nil, goodRank("nil-e2"))
	assert.EqualError(t, err, "pullconn: invalid argument: engine is nil: create it with pullconn.NewEngine")

	p, err := NewProducer(e, goodRank("p0"))
	require.NoError(t, err)
	_, err = NewProducer(e, goodRank("p0b"))
	require.ErrorIs(t, err, connector.ErrInvalid)
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
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}
	assert.Equal(t, 0, p.Held(), "nothing held by refused calls")
	params, err := p.RequestFinished("r", []int{1})
	require.NoError(t, err)
	_, err = p.RequestFinished("r", []int{2})
	assert.EqualError(t, err, `pullconn: invalid argument: request "r" is already held`)
	require.NoError(t, p.Close())

	de, err := NewEngine(connector.EngineConfig{EngineID: "d", Model: "m", Geometry: testGeometry(1, 16)})
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
		"pullconn: invalid argument: Params.RemoteIncarnation is 9007199254740992, want below 2^53": func() error {
			return cn.Load("x", bad(func(q *Params) { q.RemoteIncarnation = 1 << 53 }), nil)
		},
		`pullconn: invalid argument: request "x": localBlocks[0] is 99, layout has 64 blocks`: func() error { return cn.Load("x", params, []int{99}) },
		"pullconn: invalid argument: Params.TPSize is 0, want >= 1": func() error {
			return cn.KeepAlive("x", bad(func(q *Params) { q.TPSize = 0 }))
		},
	}
	for want, call := range loadCases {
		err := call()
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}
	assert.Equal(t, 0, cn.Pending(), "nothing loading after refused calls")
	n, _ := cn.Stats().Get("rejected_loads")
	assert.Equal(t, uint64(len(loadCases)), n, "every refusal counted")

	require.NoError(t, e.Close())
	_, err = NewProducer(e, goodRank("late"))
	require.ErrorIs(t, err, connector.ErrClosed)
	assert.EqualError(t, err, `pullconn: connector closed: engine "e" was closed`)
}

// Errors name the public package and no internal one: a handshake with an
// address where nothing listens says what failed in pullconn's words.
func TestHandshakeErrorTextNamesNoInternalPackage(t *testing.T) {
	c := newCluster(t, clusterOpts{decodeEngine: func(e *connector.EngineConfig) { e.HandshakeTimeout = 200 * time.Millisecond }})
	p := c.finish("req-1", []int{1})
	p.RemotePort = 1 // nothing listens there
	c.load("dreq-1", p, []int{2})
	err := c.result("dreq-1")[0].Err
	require.ErrorIs(t, err, connector.ErrHandshake)
	assert.True(t, strings.HasPrefix(err.Error(), `pullconn: handshake failed: engine "prefill" at 127.0.0.1:1: `), err.Error())
	assert.NotContains(t, err.Error(), "sidechannel")
	assert.NotContains(t, err.Error(), "handshake: ")
}
