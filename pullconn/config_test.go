package pullconn

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/lograte"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func TestDefaultsMatchVLLM(t *testing.T) {
	e, err := NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: testGeometry(1, 16)})
	require.NoError(t, err)
	defer e.Close()
	pe, err := engineOf(e)
	require.NoError(t, err)
	fab, _ := loopback.NewFabric()
	defer fab.Close()
	a, _ := fab.NewAgent("a")
	cfg, err := newRankConfig(pe, Config{RankConfig: connector.RankConfig{Agent: a, Layout: newLayout(fakeBuffer{}, 0, 1, 16)}})
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, cfg.Lease)
	assert.Equal(t, 5*time.Second, cfg.HeartbeatInterval, "lease/6")
	assert.Equal(t, 20*time.Second, cfg.HeartbeatExtension, "2/3 lease")
	assert.Equal(t, connector.PolicyFail, cfg.FailurePolicy)
	assert.Equal(t, 5*time.Second, connector.DefaultHandshakeTimeout)
	assert.False(t, cfg.Inline)
}

func TestRankConfigErrorsNameTheField(t *testing.T) {
	e, err := NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: testGeometry(1, 16)})
	require.NoError(t, err)
	defer e.Close()
	fab, _ := loopback.NewFabric()
	defer fab.Close()
	a, _ := fab.NewAgent("a")
	good := func() Config {
		return Config{RankConfig: connector.RankConfig{Agent: a, Layout: newLayout(fakeBuffer{}, 0, 1, 16), StatsInterval: -1}}
	}
	for want, mutate := range map[string]func(*Config){
		"RankConfig.Agent is nil": func(c *Config) { c.Agent = nil },
		"RankConfig.Lease is -1s": func(c *Config) { c.Lease = -time.Second },
		"Config.HeartbeatInterval 40s must be shorter than RankConfig.Lease 30s": func(c *Config) { c.HeartbeatInterval = 40 * time.Second },
		"Config.HeartbeatExtension is -1s":                                       func(c *Config) { c.HeartbeatExtension = -time.Second },
		"Config.TransferTimeout is -1s":                                          func(c *Config) { c.TransferTimeout = -time.Second },
		`RankConfig.FailurePolicy is "retry"`:                                    func(c *Config) { c.FailurePolicy = "retry" },
		"RankConfig.PollInterval is -1ms":                                        func(c *Config) { c.PollInterval = -time.Millisecond },
		`RankConfig.Layout.TPSize is 2, engine "e" has TP size 1`:                func(c *Config) { c.Layout.TPSize = 2 },
		`RankConfig.Layout.BlockSize is 32, engine "e" has block size 16`:        func(c *Config) { c.Layout.BlockSize = 32 },
		"RankConfig.Layout: descriptors":                                         func(c *Config) { c.Layout.HeadBytes = 0 },
	} {
		cfg := good()
		mutate(&cfg)
		wantP, wantC := sideErrors(want)
		_, err := NewProducer(e, cfg)
		require.Error(t, err, want)
		assert.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.Contains(t, err.Error(), wantP)
		_, err = NewConsumer(e, cfg)
		assert.Contains(t, err.Error(), wantC)
	}
}

// fakeBuffer gives layouts an address without memory, for validation only.
type fakeBuffer struct{}

func (fakeBuffer) Addr() uint64 { return 1 << 20 }

func TestEngineConfigErrorsNameTheField(t *testing.T) {
	for want, cfg := range map[string]connector.EngineConfig{
		"EngineConfig.EngineID is empty":                  {Model: "m", Geometry: testGeometry(1, 16)},
		"EngineConfig.Geometry.TPSize is 0, want >= 1":    {EngineID: "e", Model: "m", Geometry: func() descriptors.Geometry { g := testGeometry(1, 16); g.TPSize = 0; return g }()},
		"EngineConfig.Geometry.BlockSize is 0, want >= 1": {EngineID: "e", Model: "m", Geometry: testGeometry(1, 0)},
		"EngineConfig.Model is empty":                     {EngineID: "e", Geometry: testGeometry(1, 16)},
		"EngineConfig.HandshakeTimeout is -1s":            {EngineID: "e", Model: "m", Geometry: testGeometry(1, 16), HandshakeTimeout: -time.Second},
		`EngineConfig.KVLayout is "NHD": only "HND" is supported (token-major NHD blocks are Geometry.Order = descriptors.OrderNHD, with KVLayout left "HND")`: {EngineID: "e", Model: "m", Geometry: testGeometry(1, 16), KVLayout: "NHD"},
	} {
		_, err := NewEngine(cfg)
		require.Error(t, err, want)
		assert.ErrorIs(t, err, connector.ErrInvalid)
		assert.Contains(t, err.Error(), want)
	}
}

func TestParamsJSONKeysLikeVLLM(t *testing.T) {
	p := Params{TransferParams: connector.TransferParams{DoRemotePrefill: true, RemoteBlockIDs: []int{1, 2}, RemoteEngineID: "e", RemoteRequestID: "r", RemoteHost: "127.0.0.1", RemotePort: 5600, TPSize: 2}, PPSize: 1, TransferMode: "pull"}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1,2]],
		"remote_engine_id":"e","remote_request_id":"r","remote_host":"127.0.0.1","remote_port":5600,
		"tp_size":2,"pp_size":1,"transfer_mode":"pull"}`, string(b))
	// What vLLM's prefill returns decodes into Params.
	var q Params
	require.NoError(t, json.Unmarshal([]byte(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[4],
		"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":1,"tp_size":8}`), &q))
	require.NoError(t, q.Validate())
	assert.Equal(t, []int{4}, q.RemoteBlockIDs)
}

func TestCachedBlocks(t *testing.T) {
	p := &Params{TransferParams: connector.TransferParams{RemoteRequestID: "r", RemoteBlockIDs: make([]int, 5)}}
	n, err := cachedBlocks(p, 16, 16, 3)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = cachedBlocks(p, 16, 32, 3) // 5 blocks of 16 -> 3 of 32
	require.NoError(t, err)
	assert.Equal(t, 0, n)
	n, err = cachedBlocks(p, 32, 16, 10)
	require.NoError(t, err)
	assert.Equal(t, 0, n)
	_, err = cachedBlocks(p, 32, 16, 4)
	assert.ErrorContains(t, err, "without Params.NumTokens")
	p.NumTokens = 150 // 10 blocks of 16, 4 to load
	n, err = cachedBlocks(p, 32, 16, 4)
	require.NoError(t, err)
	assert.Equal(t, 6, n)
	_, err = cachedBlocks(&Params{TransferParams: connector.TransferParams{RemoteRequestID: "r", RemoteBlockIDs: []int{1}}}, 16, 16, 2)
	assert.ErrorContains(t, err, "2 local blocks but the request needs only 1")
}

func TestNotifyRanks(t *testing.T) {
	n, err := notifyRanks(1, 4, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{0}, n)
	n, _ = notifyRanks(3, 4, 2)
	assert.Equal(t, []int{1}, n)
	n, _ = notifyRanks(1, 2, 4)
	assert.Equal(t, []int{2, 3}, n)
	_, err = notifyRanks(0, 3, 2)
	assert.ErrorIs(t, err, connector.ErrIncompatible)
}

// FuzzProducerNotification feeds arbitrary notifications to a prefill
// rank's handlers: no panic; only a well-formed completion for the held
// request releases it; everything else is counted and changes nothing.
func FuzzProducerNotification(f *testing.F) {
	for _, s := range []string{"held:1", "held:2", "HB:held", "HB:", "other:1", "held:0", "held", ":1", "HB:a,,b", "PUSH_REG:\x80", "held:1#7", "held:1#8", "held:1#"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, err := newHolds(1, time.Minute, 16)
		require.NoError(t, err)
		clk := connector.NewManualClock(time.Unix(0, 0))
		p := &Producer{e: &pullEngine{}, cfg: rankConfig{Rank: engine.Rank{Clock: clk}, Config: Config{HeartbeatExtension: time.Second}}, stats: newStatsForTest(), log: nopLogger}
		p.hold = &holder{h: h, extension: time.Second, out: producerEdges{p}}
		p.duplicates = p.stats.Counter("duplicate_completions", "")
		p.stale = p.stats.Counter("stale_completions", "")
		require.NoError(t, h.finish("held", []int{1}, clk.Now()))
		h.setKey("held", 7)
		if notif.IsHeartbeat(msg) {
			p.onHeartbeat("peer", msg)
		} else {
			p.onCompletion("peer", msg)
		}
		// A completion may name the hold it read ("#<key>"): another key
		// is a stale copy, counted as such and changing nothing.
		c, cerr := notif.DecodeSeqCompletion(msg)
		stale := !notif.IsHeartbeat(msg) && cerr == nil && c.ID == "held" && c.Seq != 0 && c.Seq != 7
		forHeld := !notif.IsHeartbeat(msg) && cerr == nil && c.ID == "held" && !stale
		s := p.stats.Snapshot()
		if stale {
			require.Empty(t, p.freed)
			require.Equal(t, 1, h.len())
			st, _ := s.Get("stale_completions")
			require.Equal(t, uint64(1), st)
			return
		}
		if forHeld && c.N > 1 {
			// A valid first completion of several: counted, not released.
			require.Empty(t, p.freed)
			require.Equal(t, 1, h.reqs["held"].got)
			return
		}
		if forHeld {
			require.Equal(t, []string{"held"}, p.freed)
			require.Equal(t, 0, h.len())
			return
		}
		require.Empty(t, p.freed)
		require.Equal(t, 1, h.len())
		counted := s.MalformedNotifications + s.UnknownNotifications + s.LateNotifications
		_, herr := notif.DecodeHeartbeat(msg)
		if notif.IsHeartbeat(msg) && herr == nil {
			require.Equal(t, uint64(0), counted)
		} else {
			require.Equal(t, uint64(1), counted, "%q counted once", msg)
		}
		if errors.Is(cerr, notif.ErrMalformed) && !notif.IsHeartbeat(msg) {
			require.Equal(t, uint64(1), s.MalformedNotifications)
		}
	})
}

func TestEngineListenErrorNamesTheAddress(t *testing.T) {
	_, err := NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: testGeometry(1, 16), ListenAddr: "127.0.0.1:99999"})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), `pullconn: engine "e": side channel cannot listen on 127.0.0.1:99999: listen tcp`), err.Error())
	assert.NotContains(t, err.Error(), "sidechannel")
}

// FuzzKeyedProducerNotification is FuzzProducerNotification for a rank in
// gonixl's protocol (holds.keyed): only a completion naming the held
// hold's key counts; a plain one for it is refused and counted in
// refused_plain_completions; nothing else releases or changes it.
func FuzzKeyedProducerNotification(f *testing.F) {
	for _, s := range []string{"held:1", "held:2", "held:1#7", "held:2#7", "held:1#8", "held:1#", "other:1", "other:1#7", "HB:held", "held", ":1#7"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, err := newHolds(1, time.Minute, 16)
		require.NoError(t, err)
		h.keyed = true
		clk := connector.NewManualClock(time.Unix(0, 0))
		p := &Producer{e: &pullEngine{}, cfg: rankConfig{Rank: engine.Rank{Clock: clk}, Config: Config{HeartbeatExtension: time.Second}}, stats: newStatsForTest(), log: nopLogger,
			plainWarn: lograte.New(plainWarnEvery, clk.Now)}
		p.hold = &holder{h: h, extension: time.Second, out: producerEdges{p}}
		p.duplicates = p.stats.Counter("duplicate_completions", "")
		p.foreign = p.stats.Counter("foreign_completions", "")
		p.stale = p.stats.Counter("stale_completions", "")
		p.plain = p.stats.Counter("refused_plain_completions", "")
		require.NoError(t, h.finish("held", []int{1}, clk.Now()))
		h.setKey("held", 7)
		if notif.IsHeartbeat(msg) {
			p.onHeartbeat("peer", msg)
		} else {
			p.onCompletion("peer", msg)
		}
		c, cerr := notif.DecodeSeqCompletion(msg)
		completion := !notif.IsHeartbeat(msg) && cerr == nil && c.ID == "held"
		s := p.stats.Snapshot()
		plain, _ := s.Get("refused_plain_completions")
		switch {
		case completion && c.Seq == 7 && c.N == 1:
			require.Equal(t, []string{"held"}, p.freed)
			require.Equal(t, 0, h.len())
			return
		case completion && c.Seq == 7:
			require.Equal(t, 1, h.reqs["held"].got, "one of %d", c.N)
		case completion && c.Seq == 0:
			require.Equal(t, uint64(1), plain, "%q refused", msg)
			require.Equal(t, 0, h.reqs["held"].got)
			require.Empty(t, h.reqs["held"].from, "no sender recorded")
		default:
			require.Equal(t, uint64(0), plain)
		}
		require.Empty(t, p.freed)
		require.Equal(t, 1, h.len())
	})
}
