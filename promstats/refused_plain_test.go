package promstats_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/promstats"
	"github.com/gonixl/gonixl/pullconn"
)

// A pull prefill rank's refused plain completions (issue 35: a plain
// "<id>:<n>" from an agent that is no decode of the hold, in gonixl's
// protocol) are exported as the other extra counters are.
func TestRefusedPlainCompletionsExported(t *testing.T) {
	g := descriptors.Geometry{Layers: 2, KVHeads: 4, HeadDim: 4, DType: "bfloat16", BlockSize: 16, Blocks: 8, TPSize: 1}
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	t.Cleanup(func() { fab.Close() })
	e, err := pullconn.NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: g})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	a, err := fab.NewAgent("prefill-0")
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	buf, err := nixl.AllocBuffer(int(g.RankBytes()))
	require.NoError(t, err)
	t.Cleanup(func() { buf.Free() })
	l, err := g.Layout(nixl.DRAM, 0, buf.RegDesc().Desc)
	require.NoError(t, err)
	p, err := pullconn.NewProducer(e, pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	_, err = p.RequestFinished("r", []int{1})
	require.NoError(t, err)

	intruder, err := fab.NewAgent("intruder")
	require.NoError(t, err)
	t.Cleanup(func() { intruder.Close() })
	md, err := a.LocalMD()
	require.NoError(t, err)
	_, err = intruder.LoadRemoteMD(md)
	require.NoError(t, err)
	require.NoError(t, intruder.GenNotif("prefill-0", []byte("r:1"), nil))

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(promstats.New(p, promstats.Options{})))
	value := func() float64 {
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == "nixl_refused_plain_completions_total" {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1 // not exported
	}
	require.Eventually(t, func() bool { return value() == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 1, p.Held(), "the hold is kept")
}
