package pullconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl/loopback"
)

// TestTenThousandConcurrentRequests has 10,000 requests loading at once
// (TP 2 -> 2). Block b of prefill holds the tokens of "request" b, and every
// request reads prefill blocks into the decode blocks of the same ids, so
// concurrent READs into one decode block write the same bytes and the end
// state is exact: every request ends once, every hold is freed once, and
// every decode block holds its prefill block's bytes.
func TestTenThousandConcurrentRequests(t *testing.T) {
	const n = 10000
	// Transfers take 5 ms, so the requests are in flight together.
	c := newCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{2, 16},
		fabric: []loopback.FabricOption{loopback.WithModel(loopback.FixedLatency(5 * time.Millisecond))}})
	for b := 0; b < testBlocks; b++ {
		c.fill(b, []int{b}, 16)
	}
	for i := 0; i < n; i++ {
		blocks := []int{i % testBlocks, (i*7 + 3) % testBlocks}
		if blocks[0] == blocks[1] {
			blocks = blocks[:1]
		}
		p := c.finish(fmt.Sprintf("req-%d", i), blocks)
		c.load(fmt.Sprintf("dreq-%d", i), p, blocks)
	}
	res := c.results(n)
	for r := range c.cons {
		require.Len(t, res[r], n)
		for id, out := range res[r] {
			require.NoError(t, out.Err, id)
		}
	}
	freed := c.freed(n)
	for r := range c.prods {
		require.Len(t, freed[r], n)
		for id, k := range freed[r] {
			require.Equal(t, 1, k, "%s freed once on prefill rank %d", id, r)
		}
	}
	settle()
	for r, cn := range c.cons {
		assert.Empty(t, cn.Drain(), "decode rank %d: no extra result", r)
		assert.Equal(t, 0, cn.Pending())
	}
	for b := 0; b < testBlocks; b++ {
		c.verify(b, []int{b}, 0, 16)
	}
}
