package pushconn

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// completionRecorder keeps a copy of every notification a prefill agent
// attaches to a WRITE, so a test can deliver one again later, byte for
// byte, as a network that duplicates a message would.
type completionRecorder struct {
	nixl.Agent
	mu   sync.Mutex
	sent [][]byte
}

func (a *completionRecorder) CreateXferReq(op nixl.XferOp, local, remote nixl.XferList, agent string, opts *nixl.Options) (nixl.XferHandle, error) {
	if opts != nil && opts.Notif != nil {
		a.mu.Lock()
		a.sent = append(a.sent, append([]byte(nil), opts.Notif...))
		a.mu.Unlock()
	}
	return a.Agent.CreateXferReq(op, local, remote, agent, opts)
}

// last returns the last WRITE notification the agent sent.
func (a *completionRecorder) last(t testing.TB) []byte {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	require.NotEmpty(t, a.sent, "no WRITE notification recorded")
	return a.sent[len(a.sent)-1]
}

// recordingRig is a rig whose prefill agents record their WRITE
// notifications; its agents live on the fabric it returns.
func recordingRig(t *testing.T, rc rigConfig) (*rig, *loopback.Fabric, []*completionRecorder) {
	fab, err := loopback.NewFabric(rc.fabric...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, fab.Close()) })
	var recs []*completionRecorder
	rc.newAgent = func(t testing.TB, name string) nixl.Agent {
		a, err := fab.NewAgent(name)
		require.NoError(t, err)
		if strings.HasPrefix(name, "prefill") {
			rec := &completionRecorder{Agent: a}
			recs = append(recs, rec)
			return rec
		}
		return a
	}
	return newRig(t, rc), fab, recs
}

// drainFor collects consumer c's results for d.
func drainFor(c *Consumer, d time.Duration) []connector.Result {
	var out []connector.Result
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		out = append(out, c.Drain()...)
	}
	return out
}

// Hole 4: a completion named only the request id, so a late, duplicated
// copy of the completion of an earlier request of the same id counted for
// the newer one. TP 1 -> 1: the copy ends the second request done with its
// blocks unwritten, and prefill's real WRITE lands after the engine took
// them back. TP 2 -> 1: the copy counts for prefill rank 0, and rank 1's
// completion ends the request while rank 0 has not written.
func TestStaleSameIDCompletionIsNotCounted(t *testing.T) {
	for _, preTP := range []int{1, 2} {
		t.Run(fmt.Sprintf("tp%dto1", preTP), func(t *testing.T) {
			r, _, recs := recordingRig(t, rigConfig{preTP: preTP})
			c := r.consumers[0]
			src, first, second := blocksFrom(0, 2), blocksFrom(4, 2), blocksFrom(8, 2)
			// The first "X": written, done, its bytes checked by pushOne.
			pushOne(t, r, true, "X", "X", src, first, 32)
			copyOf := recs[0].last(t) // rank 0's completion of the first X
			poison(t, r.decLayout[0], first)

			// "X" again, into other blocks.
			poison(t, r.decLayout[0], second)
			require.NoError(t, c.Register("X", Coordinates(r.pre), second))
			for _, p := range r.producers {
				admitted(t, p, 2)
			}
			// The network delivers the copy of rank 0's first completion.
			require.NoError(t, r.preAgents[0].GenNotif(r.decAgents[0].Name(), copyOf, nil))
			if preTP == 2 {
				// Rank 1 writes its part of the second X.
				fill(t, r.preLayout[1], src, 9, 32)
				_, err := r.producers[1].RequestFinished("X", src)
				require.NoError(t, err)
				eventually(t, "rank 1's WRITE", func() bool { return r.producers[1].Stats().Transfers == 2 })
			}
			got := drainFor(c, 100*time.Millisecond)
			require.Empty(t, got, "a copy of the first X's completion counted for the second X")
			eventually(t, "the copy counted as stale", func() bool { return extra(t, c.Stats(), "stale_completions") == 1 })

			// Rank 0 writes the second X: done, with the second X's bytes.
			fill(t, r.preLayout[0], src, 9, 32)
			_, err := r.producers[0].RequestFinished("X", src)
			require.NoError(t, err)
			res := await(t, c, 1)
			require.NoError(t, res[0].Err)
			require.Positive(t, check(t, r.decLayout[0], second, 0, 9, 32))
			require.True(t, poisoned(t, r.decLayout[0], first), "nothing wrote into the first X's blocks after their release")
			for _, p := range r.producers {
				freedOnce(t, p, "X")
			}
		})
	}
}

// A copy of an earlier completion must not settle a draining request of
// the same id either: decode would hand its blocks back while the prefill
// rank that never answered the cancel may still write them.
func TestStaleSameIDCompletionDoesNotReleaseADrainingRequest(t *testing.T) {
	r, fab, recs := recordingRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	src, first, second := blocksFrom(0, 1), blocksFrom(4, 1), blocksFrom(8, 1)
	pushOne(t, r, true, "X", "X", src, first, 16)
	copyOf := recs[0].last(t)

	require.NoError(t, c.Register("X", Coordinates(r.pre), second))
	admitted(t, p, 2)
	// The cancel is lost: the second X drains, waiting for rank 0.
	_, err := fab.AddFault(loopback.Fault{Kind: loopback.DropNotif, From: "decode-0", To: "prefill-0", Count: 1})
	require.NoError(t, err)
	require.NoError(t, c.Abort("X"))
	eventually(t, "cancel sent", func() bool { return extra(t, c.Stats(), "push_cancel_sent") == 1 })
	require.NoError(t, r.preAgents[0].GenNotif(r.decAgents[0].Name(), copyOf, nil))
	require.Empty(t, drainFor(c, 50*time.Millisecond), "a copy of the first X's completion released the second X")
	eventually(t, "the copy counted as stale", func() bool { return extra(t, c.Stats(), "stale_completions") == 1 })
	require.Equal(t, 1, c.Pending())

	// The resent cancel reaches prefill; its ack releases the request.
	r.clock.Advance(DefaultCancelTimeout / cancelResends)
	res := await(t, c, 1)
	require.ErrorIs(t, res[0].Err, connector.ErrAborted)
}
