package pullconn

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
)

// pausedRounds stands between a rank and its agent: while paused, the
// rank's poller waits at the start of its next round, so no tick (lease
// expiry) runs, as when the machine is busy.
type pausedRounds struct {
	nixl.Agent
	mu      sync.Mutex // held while paused
	flag    sync.Mutex
	paused  bool
	waiting chan struct{} // closed once a round waits
}

func (a *pausedRounds) GetNotifs(opts *nixl.Options) (nixl.Notifs, error) {
	a.flag.Lock()
	paused, waiting := a.paused, a.waiting
	a.paused = false
	a.flag.Unlock()
	if paused {
		close(waiting)
		a.mu.Lock() // held by pause until resume: this round waits here
		defer a.mu.Unlock()
	}
	return a.Agent.GetNotifs(opts)
}

// pause returns once the rank's poller waits at the start of a round.
func (a *pausedRounds) pause() {
	a.mu.Lock()
	a.flag.Lock()
	a.paused, a.waiting = true, make(chan struct{})
	w := a.waiting
	a.flag.Unlock()
	<-w
}

func (a *pausedRounds) resume() { a.mu.Unlock() }

// Issue 35: every rank of an engine returns the same Params for one
// request (docs/pull.md), but a rank that finished the request after the
// deadline the first rank advertised had passed on its clock (a
// scheduling delay, or a step of the clock, between the two ranks' calls)
// made a new advert: another deadline and nonce, hence other Params and
// another hold key. Safe (decode's pin was refused: ErrNotHeld), but not
// what the documentation promises. The first rank to finish fixes the
// Params now, however late the others come.
func TestRanksReturnTheSameParamsAcrossTheLeaseEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		move func(*connector.ManualClock)
	}{
		{"scheduling delay", func(c *connector.ManualClock) { c.Advance(31 * time.Second) }},
		{"clock step forward", func(c *connector.ManualClock) { c.Step(time.Hour) }},
		{"clock step back", func(c *connector.ManualClock) { c.Step(-time.Hour) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := connector.NewManualClock(time.Unix(1000, 0))
			var rank0 *pausedRounds
			c := newCluster(t, clusterOpts{prefill: side{2, 16}, prefillCfg: withClock(clk),
				wrap: func(name string, a nixl.Agent) nixl.Agent {
					if name == "prefill-0" {
						rank0 = &pausedRounds{Agent: a}
						return rank0
					}
					return a
				}})
			p0, err := c.prods[0].RequestFinished("req-1", []int{1})
			require.NoError(t, err)
			// Rank 0's poller has not run since its lease ended when rank
			// 1 finishes the request.
			rank0.pause()
			tc.move(clk)
			p1, err := c.prods[1].RequestFinished("req-1", []int{1})
			rank0.resume()
			require.NoError(t, err)
			require.Equal(t, p0, p1, "both ranks' Params")
			// A later request of the id, once the ranks' holds ended, is
			// held afresh: a deadline and nonce of its own.
			for _, p := range c.prods {
				require.NoError(t, p.Abort("req-1"))
			}
			clk.Advance(2 * time.Hour)
			c.freed(1)
			q0, err := c.prods[0].RequestFinished("req-1", []int{1})
			require.NoError(t, err)
			q1, err := c.prods[1].RequestFinished("req-1", []int{1})
			require.NoError(t, err)
			require.Equal(t, q0, q1)
			require.NotEqual(t, p0.RemoteHoldNonce, q0.RemoteHoldNonce, "a new hold of the id has a key of its own")
		})
	}
}
