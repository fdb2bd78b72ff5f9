package pullconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/notif"
)

const shutdownWhy = "the prefill engine is shutting down"

// The state machine: drop keeps what a decode rank is reading (a pin that
// lasts) and, with unclaimedFor, what a decode engine asked about or what
// is too young to be for nobody; a pin of a dropped id is told why, a late
// completion of one is late, and the id may be held afresh.
func TestHoldsDrop(t *testing.T) {
	h, err := newHolds(1, 30*time.Second, 8)
	require.NoError(t, err)
	now, mono := time.Unix(1000, 0), time.Unix(5000, 0)
	for i, id := range []string{"a", "b", "c"} {
		require.NoError(t, h.finish(id, []int{i}, now))
		h.setKey(id, uint64(i+1))
		h.reqs[id].made = mono
	}
	require.Equal(t, "", h.pin("b", 2, "decode-x", "agent-x", mono.Add(10*time.Second))) // b is being read
	require.True(t, h.bind("c", "decode-y", "agent-y"))                                  // c's reader asked about it

	ids, kept := h.drop(mono.Add(500*time.Millisecond), time.Second, shutdownWhy)
	assert.Empty(t, ids, "a is younger than unclaimedFor")
	assert.Equal(t, 3, kept)
	ids, kept = h.drop(mono.Add(2*time.Second), time.Second, shutdownWhy)
	assert.Equal(t, []string{"a"}, ids, "only the unclaimed hold old enough")
	assert.Equal(t, 2, kept)
	ids, kept = h.drop(mono.Add(2*time.Second), 0, shutdownWhy)
	assert.Equal(t, []string{"c"}, ids, "every hold not being read")
	assert.Equal(t, 1, kept)
	assert.Equal(t, 1, h.len())
	_, ok := h.leases.Deadline("c")
	assert.False(t, ok, "a dropped hold's lease is gone")

	assert.Equal(t, "it dropped the hold: "+shutdownWhy, h.pin("a", 1, "decode-x", "agent-x", mono.Add(time.Minute)))
	out, err := h.complete(notif.Completion{ID: "c", N: 1}, "agent-y")
	assert.Equal(t, completionLate, out)
	assert.EqualError(t, err, `completion for request "c" after the rank dropped its hold (`+shutdownWhy+`)`)

	// The pinned hold ends with its completion, as ever.
	out, err = h.complete(notif.Completion{ID: "b", N: 1, Seq: 2}, "agent-x")
	require.NoError(t, err)
	assert.Equal(t, completionDone, out)
	// A dropped id held afresh is a new hold, not a dropped one.
	require.NoError(t, h.finish("a", []int{0}, now))
	h.setKey("a", 9)
	assert.Equal(t, "", h.pin("a", 9, "decode-x", "agent-x", mono.Add(time.Minute)))
}

// A prefill engine going away drops a hold nobody read: its blocks are freed
// at once (not at the lease), and a decode engine that then loads it fails
// at once with ErrNotHeld saying why, never done, even though prefill's
// blocks now hold other bytes.
func TestDropHoldsTellsTheDecodeThatLoadsLater(t *testing.T) {
	c := newCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{2, 16}})
	c.fill(1, []int{1, 2}, 32)
	p := c.finish("r1", []int{1, 2})
	for _, pr := range c.prods {
		dropped, kept, err := pr.DropHolds(shutdownWhy, 0)
		require.NoError(t, err)
		assert.Equal(t, [2]int{1, 0}, [2]int{dropped, kept})
		assert.Equal(t, 0, pr.Held())
	}
	for _, f := range c.freed(1) {
		assert.Equal(t, map[string]int{"r1": 1}, f)
	}
	c.rewrite(2, []int{1, 2}, 32) // the engine reused the blocks
	c.load("d1", p, []int{5, 6})
	for i, res := range c.result("d1") {
		require.ErrorIs(t, c.notDoneOrRight(res, 1, []int{5, 6}, 32), ErrNotHeld)
		assert.EqualError(t, res.Err, `pullconn: prefill does not hold the request: request "d1": prefill engine "prefill" does not hold request "r1" as its Params say (prefill engine "prefill" rank `+itoa(i)+`: it dropped the hold: `+shutdownWhy+`)`, "decode rank %d", i)
		nh, _ := c.cons[i].Stats().Get("not_held")
		assert.Equal(t, uint64(1), nh)
	}
	for i, pr := range c.prods {
		st := pr.Stats()
		dropped, _ := st.Get("dropped_holds")
		refused, _ := st.Get("unconfirmed_holds")
		assert.Equal(t, [2]uint64{1, 1}, [2]uint64{dropped, refused}, "prefill rank %d: dropped, pins refused", i)
	}
	settle()
	for _, pr := range c.prods {
		assert.Empty(t, pr.DrainFreed(), "freed once")
	}
}

// With unclaimedFor, a hold whose decode engine asked about it (it waits
// for decode blocks: KeepAlive) is kept and read, bytes intact, while one
// nobody asked about is dropped.
func TestDropHoldsKeepsClaimedHolds(t *testing.T) {
	c := newCluster(t, clusterOpts{decodeCfg: func(rc *Config) { rc.HeartbeatInterval = 5 * time.Millisecond }})
	c.fill(1, []int{1}, 16)
	claimed := c.finish("claimed", []int{1})
	c.finish("nobody", []int{2})
	require.NoError(t, c.cons[0].KeepAlive("d-claimed", claimed))
	require.Eventually(t, func() bool { v, _ := c.cons[0].Stats().Get("hold_queries"); return v >= 1 }, 10*time.Second, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // both older than unclaimedFor
	dropped, kept, err := c.prods[0].DropHolds(shutdownWhy, time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, [2]int{1, 1}, [2]int{dropped, kept})
	assert.Equal(t, map[string]int{"nobody": 1}, c.freed(1)[0])
	c.load("d-claimed", claimed, []int{7})
	require.NoError(t, c.result("d-claimed")[0].Err)
	c.verify(1, []int{7}, 0, 16)
	assert.Equal(t, map[string]int{"claimed": 1}, c.freed(1)[0], "freed on its completion")
	_, _, err = c.prods[0].DropHolds(shutdownWhy, 0)
	require.NoError(t, err)
	require.NoError(t, c.prods[0].Close())
	_, _, err = c.prods[0].DropHolds(shutdownWhy, 0)
	require.ErrorIs(t, err, errClosed)
}

// In vLLM's protocol nothing is dropped (a vLLM decode trusts the deadline
// it was given and asks nothing): every hold is kept, no longer extended,
// and still read right.
func TestDropHoldsVLLMKeepsEveryHold(t *testing.T) {
	c := newCluster(t, clusterOpts{vllm: true})
	c.fill(3, []int{1}, 16)
	p := c.finish("r1", []int{1})
	dropped, kept, err := c.prods[0].DropHolds(shutdownWhy, 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int{0, 1}, [2]int{dropped, kept})
	c.load("d1", p, []int{4})
	require.NoError(t, c.result("d1")[0].Err)
	c.verify(3, []int{4}, 0, 16)
	aborted, _ := c.prods[0].Stats().Get("aborted_requests")
	assert.Equal(t, uint64(1), aborted)
}

// A decode engine loading from a prefill engine that has shut down (its side
// channel closed) fails at once, and the error says what likely happened.
func TestLoadFromShutPrefillSaysSo(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := c.finish("r1", []int{1})
	require.NoError(t, c.prods[0].Close())
	require.NoError(t, c.pe.Close())
	start := time.Now()
	c.load("d1", p, []int{4})
	err := c.result("d1")[0].Err
	require.ErrorIs(t, err, connector.ErrHandshake)
	assert.Contains(t, err.Error(), "connection refused (nothing listens at "+joinHostPort(p.RemoteHost, p.RemotePort)+": the prefill engine shut down, or has not started)")
	assert.Less(t, time.Since(start), 2*time.Second, "no wait for a timeout")
}
