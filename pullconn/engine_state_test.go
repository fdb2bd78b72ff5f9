package pullconn

import (
	"time"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Defect 12: rank constructors on a nil or closed Engine used to panic or
// succeed; a second Producer for a rank gave an error matching no sentinel.
func TestRankConstructorsCheckTheEngine(t *testing.T) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	a, err := fab.NewAgent("a")
	require.NoError(t, err)
	defer a.Close()
	buf, err := nixl.AllocBuffer(layoutBytes(1, 16))
	require.NoError(t, err)
	defer buf.Free()
	cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: newLayout(buf, 0, 1, 16), StatsInterval: -1}}

	_, err = NewProducer(nil, cfg)
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.Equal(t, "pullconn: invalid argument: engine is nil: create it with pullconn.NewEngine", err.Error())
	_, err = NewConsumer(nil, cfg)
	require.ErrorIs(t, err, connector.ErrInvalid)
	_, err = NewConsumer(&connector.Engine{}, cfg)
	require.ErrorIs(t, err, connector.ErrInvalid)

	e, err := NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: testGeometry(1, 16)})
	require.NoError(t, err)
	p, err := NewProducer(e, cfg)
	require.NoError(t, err)
	b, err := fab.NewAgent("b")
	require.NoError(t, err)
	defer b.Close()
	_, err = NewProducer(e, Config{RankConfig: connector.RankConfig{Agent: b, Layout: cfg.Layout, StatsInterval: -1}})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.Equal(t, `pullconn: invalid argument: engine "e" already has a Producer for TP rank 0`, err.Error())
	require.NoError(t, p.Close())

	require.NoError(t, e.Close())
	require.NoError(t, e.Close(), "idempotent")
	_, err = NewProducer(e, cfg)
	require.ErrorIs(t, err, connector.ErrClosed)
	assert.Equal(t, `pullconn: connector closed: engine "e" was closed`, err.Error())
	_, err = NewConsumer(e, cfg)
	require.ErrorIs(t, err, connector.ErrClosed)
}

// Ready signals results for Drain, and a connector.Result says when its request
// started and ended on the rank's clock.
func TestReadyAndResultTimes(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := c.finish("req-1", []int{1})
	before := time.Now()
	c.load("dreq-1", p, []int{2})
	select {
	case <-c.cons[0].Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready never signalled")
	}
	out := c.cons[0].Drain()
	require.Len(t, out, 1)
	require.NoError(t, out[0].Err)
	assert.False(t, out[0].Start.Before(before))
	assert.False(t, out[0].End.Before(out[0].Start))
}
