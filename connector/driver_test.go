package connector_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn"
)

// newEngineOf is connector.NewEngine for a test's table of connectors.
func newEngineOf(name string) func(connector.EngineConfig) (*connector.Engine, error) {
	return func(cfg connector.EngineConfig) (*connector.Engine, error) {
		cfg.Connector = name
		return connector.NewEngine(cfg)
	}
}

// The connectors register by name; an engine picks one by
// EngineConfig.Connector, and a name nobody registered, or registering a
// name twice, is refused with an error that says what to do.
func TestDriversAreChosenByName(t *testing.T) {
	assert.Equal(t, []string{"pull", "push"}, connector.Drivers())
	for _, name := range []string{"pull", "push"} {
		_, e := setup(t, newEngineOf(name), "e-"+name)
		assert.Equal(t, name, e.Connector())
	}
	_, e := setup(t, connector.NewEngine, "e-default")
	assert.Equal(t, "pull", e.Connector(), "no name is vLLM's default, pull")
	_, e = setup(t, pushconn.NewEngine, "e-direct")
	assert.Equal(t, "push", e.Connector(), "an engine made by the package knows its connector")

	_, err := connector.NewEngine(connector.EngineConfig{Connector: "pul", EngineID: "x", Model: "m", Geometry: geom})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, `connector: invalid argument: EngineConfig.Connector is "pul", and no connector of that name is registered (registered: ["pull" "push"]; forgotten import of github.com/gonixl/gonixl/pulconn?)`)
	_, err = pullconn.NewEngine(connector.EngineConfig{Connector: "push", EngineID: "x", Model: "m", Geometry: geom})
	assert.EqualError(t, err, `pullconn: invalid argument: EngineConfig.Connector is "push", and pullconn starts "pull" engines (connector.NewEngine starts the one the config names)`)

	err = connector.Register("pull", nil)
	assert.EqualError(t, err, `connector: invalid argument: Register("pull"): the driver is nil`)
	var d connector.Driver = fakeDriver{}
	err = connector.Register("push", d)
	assert.EqualError(t, err, `connector: invalid argument: Register("push"): a driver of that name is registered already`)
	assert.Equal(t, []string{"pull", "push"}, connector.Drivers(), "a refused registration changes nothing")
}

type fakeDriver struct{ connector.Driver }

// A rank takes a RankConfig, or its own connector's Config for what only
// that connector has, and refuses the other connector's Config by name.
func TestRankOptionsOfTheOtherConnectorAreRefused(t *testing.T) {
	fab, pushE := setup(t, newEngineOf("push"), "push-e")
	rc := rank(t, fab, "r0")
	_, err := pushE.NewConsumer(pullconn.Config{RankConfig: rc, Inline: true})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, "pushconn: invalid argument: the rank's configuration is a pullconn.Config: a push rank takes a connector.RankConfig or a pushconn.Config")
	c, err := pushE.NewConsumer(pushconn.Config{RankConfig: rc, CancelTimeout: time.Minute})
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// Every call that takes new work returns ErrClosed once the rank's Engine
// was closed: before, RequestFinished returned Params (nil error) for a
// hold that no decode engine could ever find, the side channel being gone.
func TestRequestFinishedAfterEngineCloseIsErrClosed(t *testing.T) {
	for _, name := range []string{"pull", "push"} {
		t.Run(name, func(t *testing.T) {
			fab, e := setup(t, newEngineOf(name), "e")
			p, err := e.NewProducer(rank(t, fab, "p"))
			require.NoError(t, err)
			defer p.Close()
			require.NoError(t, e.Close())
			_, err = p.RequestFinished(connector.Request{ID: "r1", Blocks: [][]int{{0, 1}}, Tokens: 20})
			require.ErrorIs(t, err, connector.ErrClosed)
			assert.EqualError(t, err, name+`conn: connector closed: engine "e" was closed`)
			assert.Equal(t, 0, p.Held(), "nothing was taken")
			assert.Empty(t, p.DrainFreed())
		})
	}
	// The package's own Producer says the same.
	fab, e := setup(t, pullconn.NewEngine, "e")
	p, err := pullconn.NewProducer(e, pullconn.Config{RankConfig: rank(t, fab, "p")})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, e.Close())
	_, err = p.RequestFinished("r1", []int{0})
	require.ErrorIs(t, err, connector.ErrClosed)
}

// A rank whose RankConfig names no Logger logs on the Engine's, tagged
// with the rank's engine_id, tp_rank and role.
func TestRanksLogOnTheEnginesLogger(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	defer fab.Close()
	e, err := connector.NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: geom, Logger: zap.New(core)})
	require.NoError(t, err)
	defer e.Close()
	p, err := e.NewProducer(rank(t, fab, "p"))
	require.NoError(t, err)
	defer p.Close()
	_, err = p.RequestFinished(connector.Request{ID: "r1", Blocks: [][]int{{0}}})
	require.NoError(t, err)
	dropped, kept, err := p.DropHolds("the test is over", 0)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 0}, [2]int{dropped, kept})
	lines := logs.FilterMessage("pullconn: dropped holds no decode engine is reading").All()
	require.Len(t, lines, 1, "the rank's line reached the Engine's logger")
	fields := lines[0].ContextMap()
	assert.Equal(t, "e", fields["engine_id"])
	assert.Equal(t, "prefill", fields["role"])
	assert.Equal(t, "the test is over", fields["why"])
}

// A Config field that only the other side reads is refused, naming it,
// where it used to be ignored without a word.
func TestConfigFieldsOfTheOtherSideAreRefused(t *testing.T) {
	fab, pull := setup(t, pullconn.NewEngine, "pull")
	_, push := setup(t, pushconn.NewEngine, "push")
	rc := rank(t, fab, "r")
	for _, tc := range []struct {
		make func() error
		want string
	}{
		{func() error {
			_, err := pullconn.NewProducer(pull, pullconn.Config{RankConfig: rc, Inline: true})
			return err
		},
			"pullconn: invalid argument: Config.Inline is set for a Producer (prefill), which does not read it: it is decode's (a Consumer's) setting"},
		{func() error {
			_, err := pullconn.NewConsumer(pull, pullconn.Config{RankConfig: rc, HeartbeatExtension: time.Second})
			return err
		}, "pullconn: invalid argument: Config.HeartbeatExtension is set for a Consumer (decode), which does not read it: it is prefill's (a Producer's) setting"},
		{func() error {
			_, err := pushconn.NewProducer(push, pushconn.Config{RankConfig: rc, CancelTimeout: time.Minute})
			return err
		}, "pushconn: invalid argument: Config.CancelTimeout is set for a Producer (prefill), which does not read it: it is decode's (a Consumer's) setting"},
		{func() error {
			_, err := pushconn.NewConsumer(push, pushconn.Config{RankConfig: rc, MaxPeers: 3})
			return err
		},
			"pushconn: invalid argument: Config.MaxPeers is set for a Consumer (decode), which does not read it: it is prefill's (a Producer's) setting"},
	} {
		err := tc.make()
		require.ErrorIs(t, err, connector.ErrInvalid)
		assert.EqualError(t, err, tc.want)
	}
}

// Params are vLLM's kv_transfer_params object: the keys every connector
// knows are fields, every other key comes back as it came, and pull's own
// Params read the object Params write, key for key.
func TestParamsKeepEveryKey(t *testing.T) {
	in := `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[3,4]],"remote_engine_id":"p","remote_request_id":"r-1",` +
		`"remote_host":"10.0.0.1","remote_port":5600,"tp_size":2,"pp_size":1,"num_tokens":20,"remote_num_tokens":20,"transfer_mode":"pull",` +
		`"remote_blocks_expiry_time":1700000000.25,"remote_hold_nonce":12345,"vendor_key":{"a":[1,2]}}`
	var p connector.Params
	require.NoError(t, json.Unmarshal([]byte(in), &p))
	assert.Equal(t, []int{3, 4}, p.RemoteBlockIDs, "one group reads back flat")
	assert.Equal(t, "r-1", p.RemoteRequestID)
	assert.Equal(t, 20, p.NumTokens)
	assert.Equal(t, map[string]json.RawMessage{"remote_blocks_expiry_time": json.RawMessage("1700000000.25"),
		"remote_hold_nonce": json.RawMessage("12345"), "vendor_key": json.RawMessage(`{"a":[1,2]}`)}, p.Extra)
	out, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, in, string(out))

	var pp pullconn.Params
	require.NoError(t, json.Unmarshal(out, &pp))
	assert.Equal(t, 1700000000.25, pp.RemoteBlocksExpiryTime)
	assert.Equal(t, uint64(12345), pp.RemoteHoldNonce)
	assert.Equal(t, []int{3, 4}, pp.RemoteBlockIDs)

	err = json.Unmarshal([]byte(`{"remote_port":"5600"}`), &p)
	assert.EqualError(t, err, "json: cannot unmarshal string into Go struct field Params.remote_port of type int")
}

// Bytes from the network never panic Params' reader, and what it reads it
// writes back as an object it reads again to the same Params.
func FuzzParamsJSON(f *testing.F) {
	f.Add([]byte(`{"do_remote_prefill":true,"remote_block_ids":[[1],[2,3]],"remote_num_tokens":40,"x":null}`))
	f.Add([]byte(`{"remote_block_ids":[1,2],"remote_port":1,"transfer_id":"t"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p connector.Params
		if json.Unmarshal(b, &p) != nil {
			return
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("%s read, but not written: %v", b, err)
		}
		var q connector.Params
		if err := json.Unmarshal(out, &q); err != nil {
			t.Fatalf("%s written as %s, which does not read back: %v", b, out, err)
		}
		again, err := json.Marshal(q)
		if err != nil || string(again) != string(out) {
			t.Fatalf("%s written as %s, read back and written as %s (%v)", b, out, again, err)
		}
	})
}
