package pushconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/lease"
)

// 10,000 requests registered and in flight at once on one decode and one
// prefill rank: every one ends exactly once, done, with its own bytes, and
// prefill frees each exactly once.
func TestTenThousandConcurrentRequests(t *testing.T) {
	const n = 10_000
	r := newRig(t, rigConfig{numBlocks: n, clock: lease.SystemClock{},
		rank: func(c *Config) { c.IdleInterval = 2 * time.Millisecond }})
	c, p := r.consumers[0], r.producers[0]
	for i := range n {
		fill(t, r.preLayout[0], []int{i}, i+1, 16)
	}
	zero(t, r.decLayout[0], blocksFrom(0, n))
	start := time.Now()
	for i := range n {
		// Decode block n-1-i, so a copy into the wrong block shows.
		require.NoError(t, c.Register(fmt.Sprintf("load-%d-%08x", i, i), Coordinates(r.pre), []int{n - 1 - i}))
	}
	eventually(t, "all registered", func() bool { return extra(t, p.Stats(), "registrations_received") == n })
	require.Equal(t, n, c.Pending())
	for i := range n {
		_, err := p.RequestFinished(fmt.Sprintf("load-%d-%08x", i, 0xffff0000+i), []int{i})
		require.NoError(t, err)
	}
	seen := map[string]int{}
	freed := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < n || len(freed) < n {
		require.True(t, time.Now().Before(deadline), "%d results, %d freed of %d", len(seen), len(freed), n)
		for _, res := range c.Drain() {
			require.NoError(t, res.Err)
			seen[res.RequestID]++
		}
		for _, id := range p.DrainFreed() {
			freed[id]++
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	time.Sleep(10 * time.Millisecond)
	require.Empty(t, c.Drain())
	require.Empty(t, p.DrainFreed())
	for id, k := range seen {
		require.Equal(t, 1, k, id)
	}
	for id, k := range freed {
		require.Equal(t, 1, k, id)
	}
	for i := range n {
		if !holds(t, r.decLayout[0], []int{n - 1 - i}, i+1, 16) {
			t.Fatalf("request %d: wrong bytes", i)
		}
	}
	t.Logf("push: %d concurrent requests done in %v", n, elapsed.Round(time.Millisecond))
}
