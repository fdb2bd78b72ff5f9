package pushconn

import (
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
	agents := map[string]nixl.Agent{}
	layout := testLayout(t, 1, 0, 16, 64)
	defer freeLayout(layout)
	goodRank := func(name string) Config {
		if agents[name] == nil {
			a, err := fab.NewAgent(name)
			require.NoError(t, err)
			t.Cleanup(func() { a.Close() })
			agents[name] = a
		}
		return Config{RankConfig: connector.RankConfig{Agent: agents[name], Layout: layout, StatsInterval: -1}}
	}
	goodEngine := func() connector.EngineConfig {
		return connector.EngineConfig{EngineID: "e", Model: "m", Geometry: testGeometry(1, 16, numBlocks)}
	}
	for want, mutate := range map[string]func(*connector.EngineConfig){
		"pushconn: invalid argument: EngineConfig.EngineID is empty":                  func(c *connector.EngineConfig) { c.EngineID = "" },
		"pushconn: invalid argument: EngineConfig.Geometry.TPSize is 0, want >= 1":    func(c *connector.EngineConfig) { c.Geometry.TPSize = 0 },
		"pushconn: invalid argument: EngineConfig.Geometry.BlockSize is 0, want >= 1": func(c *connector.EngineConfig) { c.Geometry.BlockSize = 0 },
		`pushconn: invalid argument: EngineConfig.KVLayout is "NHD": only "HND" is supported (token-major NHD blocks are Geometry.Order = descriptors.OrderNHD, with KVLayout left "HND")`: func(c *connector.EngineConfig) { c.KVLayout = "NHD" },
	} {
		cfg := goodEngine()
		mutate(&cfg)
		e, err := NewEngine(cfg)
		assert.Nil(t, e)
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}

	e, err := NewEngine(goodEngine())
	require.NoError(t, err)
	both := map[string]func(*Config){
		"pushconn: invalid argument: RankConfig.Agent is nil":                                         func(c *Config) { c.Agent = nil },
		"pushconn: invalid argument: RankConfig.Lease is -1s, want > 0":                               func(c *Config) { c.Lease = -time.Second },
		"pushconn: invalid argument: Config.WriteTimeout is -1s, want > 0":                            func(c *Config) { c.WriteTimeout = -time.Second },
		"pushconn: invalid argument: Config.CancelTimeout is -1s, want > 0":                           func(c *Config) { c.CancelTimeout = -time.Second },
		"pushconn: invalid argument: Config.MaxPeers is -1, want > 0":                                 func(c *Config) { c.MaxPeers = -1 },
		`pushconn: invalid argument: RankConfig.FailurePolicy is "retry", want "fail" or "recompute"`: func(c *Config) { c.FailurePolicy = "retry" },
		`pushconn: invalid argument: RankConfig.Layout.BlockSize is 32, engine "e" has block size 16`: func(c *Config) { c.Layout.BlockSize = 32 },
		`pushconn: invalid argument: RankConfig.Layout.TPSize is 2, engine "e" has TP size 1`:         func(c *Config) { c.Layout.TPSize = 2 },
	}
	for want, mutate := range both {
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
	cfg := goodRank("bad")
	cfg.RegistrationTimeout = DefaultRegistrationTimeout
	_, err = NewProducer(e, cfg)
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, "pushconn: invalid argument: Config.RegistrationTimeout of a Producer is 8m0s, want less than decode's default 8m0s (DefaultRegistrationTimeout), so prefill gives up first")

	_, err = NewProducer(nil, goodRank("x"))
	assert.EqualError(t, err, "pushconn: invalid argument: engine is nil: create it with pushconn.NewEngine")
	_, err = NewConsumer(&connector.Engine{}, goodRank("x"))
	assert.EqualError(t, err, "pushconn: invalid argument: engine is nil: create it with pushconn.NewEngine")

	p, err := NewProducer(e, goodRank("p0"))
	require.NoError(t, err)
	_, err = NewProducer(e, goodRank("p0b"))
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, `pushconn: invalid argument: engine "e" already has a rank 0: close it first`)
	for want, call := range map[string]func() error{
		"pushconn: invalid argument: request id must be 1..1024 bytes, got 0":  func() error { _, err := p.RequestFinished("", []int{1}); return err },
		`pushconn: invalid argument: request "r" has no blocks`:                func() error { _, err := p.RequestFinished("r", nil); return err },
		`pushconn: invalid argument: request "r" block 0 is 64, outside 0..63`: func() error { _, err := p.RequestFinished("r", []int{64}); return err },
	} {
		err := call()
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}
	assert.Equal(t, 0, p.Held(), "nothing held by refused calls")
	require.NoError(t, p.Close())

	de, err := NewEngine(connector.EngineConfig{EngineID: "d", Model: "m", Geometry: testGeometry(1, 16, numBlocks)})
	require.NoError(t, err)
	defer de.Close()
	c, err := NewConsumer(de, goodRank("d0"))
	require.NoError(t, err)
	defer c.Close()
	pf := Prefill{EngineID: "e", Host: "127.0.0.1", Port: e.Port(), TPSize: 1, PPSize: 1}
	for want, call := range map[string]func() error{
		"pushconn: invalid argument: request id must be 1..1024 bytes, got 0":  func() error { return c.Register("", pf, []int{1}) },
		`pushconn: invalid argument: request "r" block 0 is 64, outside 0..63`: func() error { return c.Register("r", pf, []int{64}) },
		"pushconn: invalid argument: Prefill.EngineID is empty": func() error {
			q := pf
			q.EngineID = ""
			return c.Register("r", q, []int{1})
		},
		"pushconn: invalid argument: Prefill.PPSize is 0, want >= 1": func() error {
			q := pf
			q.PPSize = 0
			return c.Register("r", q, []int{1})
		},
	} {
		err := call()
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Equal(t, want, err.Error())
	}
	assert.Equal(t, 0, c.Pending(), "nothing registered by refused calls")

	require.NoError(t, e.Close())
	_, err = NewProducer(e, goodRank("late"))
	require.ErrorIs(t, err, connector.ErrClosed)
	assert.EqualError(t, err, `pushconn: connector closed: engine "e" was closed`)
}
