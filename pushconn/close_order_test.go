package pushconn

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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

// Close withdraws the KV memory from NIXL before DrainFreed hands the held
// requests back, so nothing can reach blocks the engine reuses.
func TestProducerCloseDeregistersBeforeFreeing(t *testing.T) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	var wrapped *deregisterHook
	r := newRig(t, rigConfig{newAgent: func(t testing.TB, name string) nixl.Agent {
		a, err := fab.NewAgent(name)
		require.NoError(t, err)
		if strings.HasPrefix(name, "prefill") {
			wrapped = &deregisterHook{Agent: a}
			return wrapped
		}
		return a
	}})
	p := r.producers[0]
	_, err = p.RequestFinished("held-1", blocksFrom(0, 2))
	require.NoError(t, err)
	var seenAtDeregister []string
	wrapped.hook = func() { seenAtDeregister = append(seenAtDeregister, p.DrainFreed()...) }
	require.NoError(t, p.Close())
	wrapped.hook = nil
	require.Empty(t, seenAtDeregister, "blocks handed back while still registered with NIXL")
	require.Equal(t, []string{"held-1"}, p.DrainFreed())
}
