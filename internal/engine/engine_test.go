package engine

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/internal/handshake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errTestInvalid = errors.New("testconn: invalid argument")

var testConn = Connector{Name: "testconn", Mode: handshake.ModePull, ErrInvalid: errTestInvalid}

func TestStartErrorsNameTheField(t *testing.T) {
	ok := Config{EngineID: "e", Model: "m", DType: "d", TPSize: 1, BlockSize: 16}
	for _, tc := range []struct {
		want string
		edit func(*Config)
		mode string
	}{
		{"EngineConfig.EngineID is empty", func(c *Config) { c.EngineID = "" }, handshake.ModePull},
		{"EngineConfig.TPSize is 0, want >= 1", func(c *Config) { c.TPSize = 0 }, handshake.ModePull},
		{"EngineConfig.BlockSize is 0, want >= 1", func(c *Config) { c.BlockSize = 0 }, handshake.ModePull},
		{"EngineConfig.HandshakeTimeout is -1s, want > 0", func(c *Config) { c.HandshakeTimeout = -time.Second }, handshake.ModePull},
		{"EngineConfig.Model is empty", func(c *Config) { c.Model = "" }, handshake.ModePull},
		{"EngineConfig.DType is empty", func(c *Config) { c.DType = "" }, handshake.ModePush},
		{`EngineConfig: compat mode is "", want "pull" or "push"`, func(*Config) {}, ""},
	} {
		cfg := ok
		tc.edit(&cfg)
		e, err := Start(cfg, Connector{Name: "testconn", Mode: tc.mode, ErrInvalid: errTestInvalid})
		assert.Nil(t, e)
		assert.ErrorIs(t, err, errTestInvalid)
		assert.EqualError(t, err, "testconn: invalid argument: "+tc.want)
	}
}

func TestStartFillsDefaultsAndAdvertisesTheListenHost(t *testing.T) {
	e, err := Start(Config{EngineID: "e", Model: "m", DType: "d", TPSize: 2, BlockSize: 16}, testConn)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	cfg := e.Config()
	assert.Equal(t, "127.0.0.1:0", cfg.ListenAddr)
	assert.Equal(t, "HND", cfg.KVLayout)
	assert.Equal(t, DefaultHandshakeTimeout, cfg.HandshakeTimeout)
	require.NotNil(t, cfg.Logger)
	assert.Equal(t, "127.0.0.1", e.Host())
	assert.NotZero(t, e.Port())
	assert.Equal(t, uint64(0), e.Stats().FailedHandshakes)
}

func TestStartUsesAdvertiseHost(t *testing.T) {
	e, err := Start(Config{EngineID: "e", Model: "m", DType: "d", TPSize: 1, BlockSize: 16, AdvertiseHost: "prefill-0.example"}, testConn)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	assert.Equal(t, "prefill-0.example", e.Host())
}

func TestStartReportsABusyListenAddress(t *testing.T) {
	a, err := Start(Config{EngineID: "a", Model: "m", DType: "d", TPSize: 1, BlockSize: 16}, testConn)
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
	b, err := Start(Config{EngineID: "b", Model: "m", DType: "d", TPSize: 1, BlockSize: 16, ListenAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port()))}, testConn)
	assert.Nil(t, b)
	require.Error(t, err)
	assert.NotErrorIs(t, err, errTestInvalid)
	assert.Contains(t, err.Error(), `testconn: engine "b": side channel cannot listen on 127.0.0.1:`)
}
