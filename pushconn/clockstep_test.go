package pushconn

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

// roundTap counts the rounds of the poller of the rank it stands in front
// of (one GetNotifs a round: it hides the loopback agent's batch poll, so
// the poller falls back to it), so a test knows that a whole round, tick
// included, ran after what it did, without sleeping.
type roundTap struct {
	nixl.Agent
	n atomic.Int64
}

func (a *roundTap) GetNotifs(opts *nixl.Options) (nixl.Notifs, error) {
	a.n.Add(1)
	return a.Agent.GetNotifs(opts)
}

// waitRound returns once a whole round of the poller began and ended
// after the call: rounds run one after another, so the second GetNotifs
// from now comes after the tick of the round of the first.
func (a *roundTap) waitRound(t testing.TB, wake func()) {
	t.Helper()
	from := a.n.Load()
	eventually(t, "a poller round", func() bool { wake(); return a.n.Load() >= from+2 })
}

// clockStepRig is a rig whose decode ranks run on their own ManualClock
// (dc), beside the prefill ranks' (rig.clock) and the fabric's (fc): a
// 4 KiB WRITE moves for 100 s of fabric time, so it is in flight while
// the test steps the ranks' clocks.
func clockStepRig(t *testing.T, rc rigConfig, decRank func(*Config)) (r *rig, fc, dc *connector.ManualClock, decTap, preTap *roundTap) {
	fc = connector.NewManualClock(rigStart)
	dc = connector.NewManualClock(rigStart)
	rc.fabric = []loopback.FabricOption{loopback.WithClock(fc), loopback.WithModel(loopback.Bandwidth(4096.0/100, 0))}
	inner := rc.wrap
	rc.wrap = func(name string, a nixl.Agent) nixl.Agent {
		if inner != nil {
			a = inner(name, a)
		}
		tap := &roundTap{Agent: a}
		if strings.HasPrefix(name, "decode") {
			decTap = tap
		} else {
			preTap = tap
		}
		return tap
	}
	rc.decRank = func(c *Config) {
		c.Clock = dc
		if decRank != nil {
			decRank(c)
		}
	}
	return newRig(t, rc), fc, dc, decTap, preTap
}

// Issue 35: decode timed its wait for the answers to PUSH_CANCEL on its
// configured clock, so a forward step of a clock whose readings carry no
// monotonic part (ManualClock, a user's clock) ended the wait at once: the
// aborted request's result came out while prefill's WRITE into its blocks
// was in flight, and the WRITE then landed in blocks the engine had
// reused. The wait runs on the monotonic clock now, in both protocols:
// steps either way neither end it nor stretch it.
func TestCancelWaitIgnoresClockSteps(t *testing.T) {
	for _, proto := range []string{"gonixl", "vllm"} {
		t.Run(proto, func(t *testing.T) {
			r, fc, dc, tap, _ := clockStepRig(t, rigConfig{vllm: proto == "vllm"}, func(c *Config) {
				c.RegistrationTimeout = 10 * time.Second
				c.CancelTimeout = 2 * time.Second
			})
			c, p := r.consumers[0], r.producers[0]
			dst := []int{4}
			zero(t, r.decLayout[0], dst)
			require.NoError(t, c.Register("x", Coordinates(r.pre), dst))
			admitted(t, p, 1)
			fill(t, r.preLayout[0], []int{1}, 3, 16)
			_, err := p.RequestFinished("x", []int{1})
			require.NoError(t, err)
			eventually(t, "WRITE posted", func() bool { return r.fabric.Counters().Posted == 1 })
			require.NoError(t, c.Abort("x")) // drains while the WRITE moves

			var out []connector.Result
			for _, step := range []time.Duration{time.Hour, -2 * time.Hour, 48 * time.Hour} {
				dc.Step(step)
				tap.waitRound(t, func() { out = append(out, c.Drain()...) })
				out = append(out, c.Drain()...)
				if len(out) > 0 {
					break
				}
			}
			if len(out) > 0 { // the engine takes the blocks back and reuses them
				poison(t, r.decLayout[0], dst)
			}
			require.Zero(t, r.fabric.Counters().Completed, "the WRITE is still in flight")
			fc.Advance(200 * time.Second) // the WRITE lands
			eventually(t, "WRITE landed", func() bool { return r.fabric.Counters().Completed == 1 })
			if len(out) > 0 {
				require.True(t, poisoned(t, r.decLayout[0], dst), "the WRITE landed in blocks decode had handed back")
				require.Empty(t, out, "a step of decode's clock handed back blocks a WRITE was moving into")
			}
			// gonixl's protocol: prefill acknowledges the cancel once the
			// WRITE ended. vLLM's: the WRITE's completion ends the drain.
			res := await(t, c, 1)
			require.ErrorIs(t, res[0].Err, connector.ErrAborted)
			assert.Zero(t, extra(t, c.Stats(), "cancel_timeouts"))
			assert.Zero(t, extra(t, c.Stats(), "write_bound_releases"))
		})
	}
}

// The cancel wait still ends at its deadline on the monotonic clock when
// no prefill rank answers: not a nanosecond before, whatever the steps.
func TestCancelWaitEndsAtItsMonotonicDeadline(t *testing.T) {
	for _, proto := range []string{"gonixl", "vllm"} {
		t.Run(proto, func(t *testing.T) {
			r, _, dc, tap, _ := clockStepRig(t, rigConfig{vllm: proto == "vllm"}, func(c *Config) {
				c.RegistrationTimeout = 10 * time.Second
				c.CancelTimeout = 2 * time.Second
			})
			c, p := r.consumers[0], r.producers[0]
			require.NoError(t, c.Register("x", Coordinates(r.pre), []int{4}))
			admitted(t, p, 1)
			_, err := p.RequestFinished("x", []int{1})
			require.NoError(t, err)
			eventually(t, "WRITE posted", func() bool { return r.fabric.Counters().Posted == 1 })
			require.NoError(t, c.Abort("x"))
			tap.waitRound(t, func() { c.Drain() })
			// gonixl: the abort's time plus the cancel timeout. vLLM: the
			// registration (sent at 0 on the monotonic clock) plus the
			// registration timeout, plus the cancel timeout.
			left := 2 * time.Second
			if proto == "vllm" {
				left = 12 * time.Second
			}
			dc.Step(-time.Hour)
			dc.Advance(left - time.Nanosecond)
			dc.Step(3 * time.Hour)
			tap.waitRound(t, func() {})
			require.Empty(t, c.Drain(), "released before the deadline on the monotonic clock")
			dc.Advance(time.Nanosecond)
			res := await(t, c, 1)
			require.ErrorIs(t, res[0].Err, connector.ErrAborted)
			if proto == "vllm" {
				assert.Equal(t, uint64(1), extra(t, c.Stats(), "write_bound_releases"))
			} else {
				assert.Equal(t, uint64(1), extra(t, c.Stats(), "cancel_timeouts"))
			}
		})
	}
}

// Issue 35, prefill: a WRITE that failed (here: its write timeout) and
// that the agent would not let go of waited for the agent on the
// configured clock, so a forward step reported it failed at once: decode
// took its blocks back and prefill freed its own while the WRITE still
// moved bytes. The wait runs on the monotonic clock now.
func TestUnreleasedWriteIgnoresClockSteps(t *testing.T) {
	r, fc, _, _, tap := clockStepRig(t, rigConfig{
		preRank: func(c *Config) { c.WriteTimeout = time.Second },
		wrap: func(name string, a nixl.Agent) nixl.Agent {
			if strings.HasPrefix(name, "prefill") {
				return refuseRelease{a}
			}
			return a
		},
	}, nil)
	c, p := r.consumers[0], r.producers[0]
	dst := []int{4}
	zero(t, r.decLayout[0], dst)
	require.NoError(t, c.Register("x", Coordinates(r.pre), dst))
	admitted(t, p, 1)
	fill(t, r.preLayout[0], []int{1}, 3, 16)
	_, err := p.RequestFinished("x", []int{1})
	require.NoError(t, err)
	eventually(t, "WRITE posted", func() bool { return r.fabric.Counters().Posted == 1 })
	r.clock.Advance(time.Second) // the write timeout: the agent will not let go
	tap.waitRound(t, func() {})
	for _, step := range []time.Duration{time.Hour, -2 * time.Hour, 48 * time.Hour} {
		r.clock.Step(step)
		tap.waitRound(t, func() {})
	}
	assert.Empty(t, p.DrainFreed(), "no free while the WRITE may still read")
	assert.Zero(t, extra(t, p.Stats(), "stuck_writes"))
	require.Empty(t, c.Drain(), "no result while the WRITE may still land")
	fc.Advance(200 * time.Second) // the WRITE lands; the agent lets go
	res := await(t, c, 1)
	if res[0].Err == nil {
		require.Positive(t, check(t, r.decLayout[0], dst, 0, 3, 16), "done only with the whole WRITE landed")
	} else {
		require.True(t, isPushFail(res[0].Err, "transfer"), "got %v", res[0].Err)
	}
	freedOnce(t, p, "x")
}
