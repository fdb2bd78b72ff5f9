package connector_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
	"github.com/gonixl/gonixl/pushconn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var geom = descriptors.Geometry{Layers: 2, KVHeads: 4, HeadDim: 8, DType: "bfloat16", BlockSize: 16, Blocks: 32, TPSize: 1}

// setup returns a loopback fabric and an engine of newEngine's, closed
// when the test ends.
func setup(t *testing.T, newEngine func(connector.EngineConfig) (*connector.Engine, error), id string) (*loopback.Fabric, *connector.Engine) {
	t.Helper()
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	t.Cleanup(func() { fab.Close() })
	e, err := newEngine(connector.EngineConfig{EngineID: id, Model: "m", Geometry: geom, HandshakeTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return fab, e
}

func rank(t *testing.T, fab *loopback.Fabric, name string) connector.RankConfig {
	t.Helper()
	a, err := fab.NewAgent(name)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	buf, err := nixl.AllocBuffer(int(geom.RankBytes()))
	require.NoError(t, err)
	t.Cleanup(func() { buf.Free() })
	l, err := geom.Layout(nixl.DRAM, 0, buf.RegDesc().Desc)
	require.NoError(t, err)
	return connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}
}

// A rank refuses an engine of the other protocol, with an error that says
// which constructor made it and which one it needs, and changes nothing:
// the right rank takes the same TP rank afterwards.
func TestRankRefusesTheOtherProtocolsEngine(t *testing.T) {
	fab, pushE := setup(t, pushconn.NewEngine, "push-e")
	_, pullE := setup(t, pullconn.NewEngine, "pull-e")
	rc := rank(t, fab, "r0")

	_, err := pullconn.NewProducer(pushE, pullconn.Config{RankConfig: rc})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, `pullconn: invalid argument: engine "push-e" was made by pushconn.NewEngine: a pull rank needs one from pullconn.NewEngine`)
	_, err = pushconn.NewConsumer(pullE, pushconn.Config{RankConfig: rc})
	assert.EqualError(t, err, `pushconn: invalid argument: engine "pull-e" was made by pullconn.NewEngine: a push rank needs one from pushconn.NewEngine`)

	p, err := pushconn.NewProducer(pushE, pushconn.Config{RankConfig: rc})
	require.NoError(t, err)
	require.NoError(t, p.Close())
}

// The engine takes its geometry once and checks every rank's layout
// against it, naming the field that differs.
func TestEngineChecksTheLayoutAgainstItsGeometry(t *testing.T) {
	fab, e := setup(t, pullconn.NewEngine, "e")
	assert.Equal(t, geom, e.Geometry())
	for want, edit := range map[string]func(*descriptors.Layout){
		`RankConfig.Layout.NumBlocks is 16, the geometry's is 32 (engine "e")`:                      func(l *descriptors.Layout) { l.NumBlocks = 16 },
		`RankConfig.Layout.DType is "float16", the geometry's is "bfloat16" (engine "e")`:           func(l *descriptors.Layout) { l.DType = "float16" },
		`RankConfig.Layout.HeadBytes is 8, the geometry's is 16 (HeadDim 8 x 2 bytes) (engine "e")`: func(l *descriptors.Layout) { l.HeadBytes = 8 },
	} {
		rc := rank(t, fab, "r-"+want[:20])
		edit(&rc.Layout)
		_, err := pullconn.NewConsumer(e, pullconn.Config{RankConfig: rc})
		require.ErrorIs(t, err, connector.ErrInvalid, want)
		assert.EqualError(t, err, "pullconn: invalid argument: "+want)
	}
	_, err := pullconn.NewEngine(connector.EngineConfig{EngineID: "e2", Model: "m"})
	assert.EqualError(t, err, "pullconn: invalid argument: EngineConfig.Geometry.Layers is 0, want >= 1")
}

// Stats come out of a rank as the public type, its extra counters in
// order and readable by name.
func TestStatsArePublic(t *testing.T) {
	fab, e := setup(t, pullconn.NewEngine, "e")
	c, err := pullconn.NewConsumer(e, pullconn.Config{RankConfig: rank(t, fab, "c")})
	require.NoError(t, err)
	defer c.Close()
	require.ErrorIs(t, c.Load("", pullconn.Params{}, nil), connector.ErrInvalid)
	s := c.Stats()
	v, ok := s.Get("rejected_loads")
	assert.True(t, ok)
	assert.Equal(t, uint64(1), v)
	_, ok = s.Get("no_such_counter")
	assert.False(t, ok)
	assert.Equal(t, "rejected_loads", s.Extra[0].Name)
	assert.NotEmpty(t, s.Extra[0].Help)
	assert.Len(t, s.XferTimeHist.Bounds, len(s.XferTimeHist.Cumulative))
}

// A Copier of the caller's runs where the connectors stage, and a failing
// one fails the rank's start (MeasureCopy) with an error naming the field.
func TestCallersCopierRuns(t *testing.T) {
	fab, e := setup(t, pullconn.NewEngine, "e")
	sbuf, err := nixl.AllocBuffer(2 << 20)
	require.NoError(t, err)
	defer sbuf.Free()
	var calls int
	failing := copierFunc(func(segs []connector.Seg) error {
		calls++
		return errors.New("copy engine down")
	})
	rc := rank(t, fab, "p")
	rc.Staging = connector.Staging{Mode: connector.StagingAuto, Mem: nixl.DRAM, Base: sbuf.Addr(), SlotBytes: 1 << 20, Slots: 2, Copier: failing, MeasureCopy: true}
	_, err = pullconn.NewProducer(e, pullconn.Config{RankConfig: rc})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, "pullconn: invalid argument: RankConfig.Staging: staging: measuring the copy bandwidth: copy engine down")
	assert.Equal(t, 1, calls)
}

type copierFunc func([]connector.Seg) error

func (f copierFunc) Copy(segs []connector.Seg) error { return f(segs) }

// Without the cuda build tag the GPU copier is a clear error.
func TestGPUCopierWithoutCUDA(t *testing.T) {
	c, err := connector.NewGPUCopier(0)
	if err == nil {
		require.NoError(t, c.Close())
		t.Skip("built with the cuda tag and a GPU is present")
	}
	assert.Nil(t, c)
	assert.Contains(t, err.Error(), "cuda")
}

// A closed engine refuses new ranks with ErrClosed; Close is idempotent.
func TestClosedEngine(t *testing.T) {
	fab, e := setup(t, pushconn.NewEngine, "e")
	require.NoError(t, e.Close())
	require.NoError(t, e.Close())
	_, err := pushconn.NewProducer(e, pushconn.Config{RankConfig: rank(t, fab, "p")})
	require.ErrorIs(t, err, connector.ErrClosed)
	assert.EqualError(t, err, `pushconn: connector closed: engine "e" was closed`)
}
