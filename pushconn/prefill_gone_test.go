package pushconn

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
)

// unloadGate stands between decode's rank and its agent: while held, it
// tells when InvalidateRemoteMD is called and holds the call until the
// test answers it, so a test sees what decode did before the metadata was
// unloaded; once let go, every call gets the same answer at once.
type unloadGate struct {
	nixl.Agent
	entered chan string // the remote named by each held call, as it begins
	proceed chan error  // what a held call returns (nil: unload it)

	mu     sync.Mutex
	free   bool  // calls are no longer held
	answer error // what a call returns once free (nil: unload it)
}

func newUnloadGate(a nixl.Agent) *unloadGate {
	return &unloadGate{Agent: a, entered: make(chan string, 16), proceed: make(chan error, 16)}
}

// next returns the remote of the next held InvalidateRemoteMD call,
// failing after 10 s.
func (g *unloadGate) next(t *testing.T) string {
	t.Helper()
	select {
	case remote := <-g.entered:
		return remote
	case <-time.After(10 * time.Second):
		t.Fatal("decode never unloaded a prefill agent's metadata")
		return ""
	}
}

// letGo answers the held call, if any, and every later one with err.
func (g *unloadGate) letGo(err error) {
	g.mu.Lock()
	g.free, g.answer = true, err
	g.mu.Unlock()
	g.proceed <- err
}

func (g *unloadGate) InvalidateRemoteMD(remote string) error {
	g.mu.Lock()
	free, answer := g.free, g.answer
	g.mu.Unlock()
	if !free {
		g.entered <- remote
		answer = <-g.proceed
	}
	if answer != nil {
		return answer
	}
	return g.Agent.InvalidateRemoteMD(remote)
}

// goneRig is a rig whose decode rank logs to an observer and unloads
// metadata through a gate.
func goneRig(t *testing.T) (*rig, *unloadGate, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	var gate *unloadGate
	r := newRig(t, rigConfig{
		wrap: func(name string, a nixl.Agent) nixl.Agent {
			if name != "decode-0" {
				return a
			}
			gate = newUnloadGate(a)
			return gate
		},
		decRank: func(c *Config) { c.Logger = zap.New(core) },
	})
	t.Cleanup(func() { gate.letGo(nil) }) // before the rig closes: no call stays held
	return r, gate, logs
}

// After kill -9 of prefill (agent, rank and side channel gone, no
// restart), a request decode aborts hands its blocks back as soon as
// decode has seen the prefill rank gone (its PUSH_CANCEL cannot be sent,
// the engine's address refuses the handshake) and has unloaded the dead
// agent's metadata — not one moment before, and without the cancel
// timeout (the clock never moves). The release is logged with the
// request, the engine and the reason.
func TestAbortAfterPrefillKilledReleasesOnceTheDeadAgentIsUnloaded(t *testing.T) {
	r, gate, logs := goneRig(t)
	c := r.consumers[0]
	require.NoError(t, c.Register("doomed", Coordinates(r.pre), []int{4, 5}))
	admitted(t, r.producers[0], 1)
	crashPrefill(t, r)

	require.NoError(t, c.Abort("doomed"))
	require.Equal(t, "prefill-0", gate.next(t))
	require.Empty(t, c.Drain(), "blocks handed back while the dead agent's metadata was still loaded")
	require.Equal(t, 1, c.Pending())
	gate.proceed <- nil

	res := await(t, c, 1)
	require.Equal(t, "doomed", res[0].RequestID)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	require.Zero(t, c.Pending())
	require.ErrorIs(t, r.decAgents[0].CheckRemoteMD("prefill-0", nixl.XferList{}), nixl.ErrNotFound)
	s := c.Stats()
	require.Equal(t, uint64(1), extra(t, s, "prefill_gone"))
	require.Zero(t, extra(t, s, "cancel_timeouts"), "released before the cancel timeout")

	lines := logs.FilterMessageSnippet("prefill rank is gone").All()
	require.Len(t, lines, 1)
	f := lines[0].ContextMap()
	require.Equal(t, "doomed", f["request"])
	require.Equal(t, "prefill", f["prefill"])
	require.Contains(t, f["reason"], "refuses connections")
}

// A prefill rank whose metadata decode cannot unload keeps the aborted
// request's blocks until the cancel timeout, as before: decode never hands
// them back on the word of a failed send alone.
func TestAbortKeepsBlocksWhenTheDeadAgentCannotBeUnloaded(t *testing.T) {
	r, gate, _ := goneRig(t)
	c := r.consumers[0]
	require.NoError(t, c.Register("doomed", Coordinates(r.pre), []int{4, 5}))
	admitted(t, r.producers[0], 1)
	crashPrefill(t, r)

	require.NoError(t, c.Abort("doomed"))
	require.Equal(t, "prefill-0", gate.next(t))
	gate.proceed <- errors.New("injected: cannot unload")
	eventually(t, "unload failure counted", func() bool { return extra(t, c.Stats(), "prefill_unload_failed") == 1 })
	require.Empty(t, c.Drain())
	require.Equal(t, 1, c.Pending())
	require.Zero(t, extra(t, c.Stats(), "prefill_gone"))

	// The resends of the PUSH_CANCEL try again, and fail again.
	gate.letGo(errors.New("injected: cannot unload"))
	r.clock.Advance(DefaultCancelTimeout + 1)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	require.Equal(t, uint64(1), extra(t, c.Stats(), "cancel_timeouts"))
	require.Zero(t, extra(t, c.Stats(), "prefill_gone"))
}

// A prefill rank cut off the network but alive (its side channel still
// serves the same incarnation) is not gone: it could write again once the
// link is back, so decode keeps the aborted request's blocks until the rank
// acknowledges the PUSH_CANCEL.
func TestAbortKeepsBlocksWhilePartitionedPrefillIsAlive(t *testing.T) {
	r, gate, _ := goneRig(t)
	c := r.consumers[0]
	gate.letGo(nil)
	require.NoError(t, c.Register("cut", Coordinates(r.pre), []int{4, 5}))
	admitted(t, r.producers[0], 1)
	require.NoError(t, r.fabric.Disconnect("prefill-0"))

	require.NoError(t, c.Abort("cut"))
	eventually(t, "decode asked the prefill engine again", func() bool { return extra(t, c.Stats(), "handshakes") == 2 })
	require.Empty(t, c.Drain(), "blocks handed back while the partitioned rank could still write")
	require.Equal(t, 1, c.Pending())
	require.Zero(t, extra(t, c.Stats(), "prefill_gone"))

	require.NoError(t, r.fabric.Reconnect("prefill-0"))
	r.clock.Advance(DefaultCancelTimeout / cancelResends) // the next PUSH_CANCEL goes out
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
	require.Equal(t, uint64(1), extra(t, c.Stats(), "push_cancel_ack_received"))
	require.Zero(t, extra(t, c.Stats(), "prefill_gone"))
}
