package pullconn

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// stuckReads is a decode agent whose backend cannot cancel a READ in
// flight: ReleaseXferReq returns ErrRepostActive and the READ goes on, as
// the native agent documents. It also counts its poller's rounds (one
// GetNotifs a round: it hides the loopback agent's batch poll), so that a
// test knows that a whole round ran after what it did, without sleeping.
type stuckReads struct {
	nixl.Agent
	rounds atomic.Int64
}

func (a *stuckReads) ReleaseXferReq(h nixl.XferHandle) error {
	if st, err := a.Agent.XferStatus(h); err == nil && st == nixl.StatusInProgress {
		return nixl.ErrRepostActive
	}
	return a.Agent.ReleaseXferReq(h)
}

func (a *stuckReads) GetNotifs(opts *nixl.Options) (nixl.Notifs, error) {
	a.rounds.Add(1)
	return a.Agent.GetNotifs(opts)
}

// waitRound returns once a whole round of the poller began and ended
// after the call: the second GetNotifs from now comes after the tick of
// the round of the first.
func (a *stuckReads) waitRound(t *testing.T) {
	t.Helper()
	from := a.rounds.Load()
	require.Eventually(t, func() bool { return a.rounds.Load() >= from+2 }, 10*time.Second, time.Millisecond)
}

// Issue 35, pull: a load whose READ failed (here: its transfer timeout)
// and that the agent would not let go of kept its blocks until the agent
// did, or until TransferTimeout more on the configured clock: a forward
// step of a clock whose readings carry no monotonic part (ManualClock, a
// user's clock) handed the blocks back at once, while the READ could still
// write into them. The wait runs on the monotonic clock now.
func TestUnreleasedReadIgnoresClockSteps(t *testing.T) {
	fc := connector.NewManualClock(time.Unix(1000, 0)) // the fabric's: a READ takes 100 s
	dc := connector.NewManualClock(time.Unix(5000, 0)) // decode's
	var tap *stuckReads
	c := newCluster(t, clusterOpts{
		fabric:    []loopback.FabricOption{loopback.WithClock(fc), loopback.WithModel(loopback.FixedLatency(100 * time.Second))},
		decodeCfg: func(cfg *Config) { cfg.Clock, cfg.TransferTimeout = dc, time.Second },
		wrap: func(name string, a nixl.Agent) nixl.Agent {
			if strings.HasPrefix(name, "decode") {
				tap = &stuckReads{Agent: a}
				return tap
			}
			return a
		},
	})
	p := c.finish("req-1", []int{1})
	c.load("dreq-1", p, []int{5})
	require.Eventually(t, func() bool { return c.fab.Counters().Posted == 1 }, 10*time.Second, time.Millisecond)
	dc.Advance(time.Second) // the transfer timeout: the agent will not let go
	tap.waitRound(t)
	var out []connector.Result
	for _, step := range []time.Duration{time.Hour, -2 * time.Hour, 48 * time.Hour} {
		dc.Step(step)
		tap.waitRound(t)
		out = append(out, c.cons[0].Drain()...)
	}
	stuck, ok := c.cons[0].Stats().Get("stuck_transfers")
	require.True(t, ok)
	assert.Zero(t, stuck)
	require.Empty(t, out, "a step of decode's clock handed back blocks a READ may still write into")
	fc.Advance(100 * time.Second) // the READ ends; the agent lets go
	res := c.result("dreq-1")[0]
	require.ErrorIs(t, res.Err, ErrTimeout)
}
