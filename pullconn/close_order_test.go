package pullconn

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// deregisterHook is an agent that runs a hook when DeregisterMem starts.
type deregisterHook struct {
	nixl.Agent
	hook func()
}

func (a *deregisterHook) DeregisterMem(list nixl.RegList, opts *nixl.Options) error {
	if a.hook != nil {
		a.hook()
	}
	return a.Agent.DeregisterMem(list, opts)
}

// Close must withdraw the KV memory from NIXL before it tells the engine
// that held blocks are free: a decode READ could otherwise still reach
// blocks the engine already gave to another request.
func TestProducerCloseDeregistersBeforeFreeing(t *testing.T) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	a, err := fab.NewAgent("prefill-0")
	require.NoError(t, err)
	defer a.Close()
	e, err := NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: testGeometry(1, 16)})
	require.NoError(t, err)
	defer e.Close()
	buf, err := nixl.AllocBuffer(layoutBytes(1, 16))
	require.NoError(t, err)
	defer buf.Free()
	wrapped := &deregisterHook{Agent: a}
	p, err := NewProducer(e, Config{RankConfig: connector.RankConfig{Agent: wrapped, Layout: newLayout(buf, 0, 1, 16), StatsInterval: -1}})
	require.NoError(t, err)
	_, err = p.RequestFinished("held-1", []int{1, 2})
	require.NoError(t, err)
	var seenAtDeregister []string
	wrapped.hook = func() { seenAtDeregister = append(seenAtDeregister, p.DrainFreed()...) }
	require.NoError(t, p.Close())
	require.Empty(t, seenAtDeregister, "blocks handed back while still registered with NIXL")
	require.Equal(t, []string{"held-1"}, p.DrainFreed())
}
