package pullconn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/connector"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func blocksFrom(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// transferCase runs one request of `tokens` tokens through the cluster and
// verifies every byte on every decode rank.
func transferCase(t *testing.T, o clusterOpts, tokens int) *cluster {
	o.defaults()
	c := newCluster(t, o)
	pblocks := blocksFrom(3, (tokens+o.prefill.bs-1)/o.prefill.bs)
	dblocks := blocksFrom(10, (tokens+o.decode.bs-1)/o.decode.bs)
	c.fill(7, pblocks, tokens)
	p := c.finish("req-1", pblocks)
	c.load("dreq-1", p, dblocks)
	for i, r := range c.result("dreq-1") {
		require.NoError(t, r.Err, "decode rank %d", i)
	}
	c.verify(7, dblocks, 0, tokens)
	freed := c.freed(1)
	for i := range c.prods {
		assert.Equal(t, map[string]int{"req-1": 1}, freed[i])
	}
	settle()
	for _, p := range c.prods {
		assert.Empty(t, p.DrainFreed())
		assert.Equal(t, 0, p.Held())
	}
	return c
}

func TestHappyPathBytesVerified(t *testing.T) {
	c := transferCase(t, clusterOpts{}, 100)
	ds := c.cons[0].Stats()
	assert.Equal(t, uint64(1), ds.Transfers)
	// Whole blocks move: 7 blocks x 16 tokens x 4 heads x 8 bytes x 4 regions.
	assert.Equal(t, uint64(7*16*4*8*4), ds.Bytes)
	assert.Equal(t, uint64(0), ds.FailedTransfers)
	assert.Equal(t, uint64(1), ds.PostTime.Count)
	ps := c.prods[0].Stats()
	assert.Equal(t, uint64(0), ps.ExpiredRequests+ps.UnknownNotifications+ps.MalformedNotifications)
	fc := c.fab.Counters()
	assert.Equal(t, uint64(1), fc.Completed)
}

func TestPrefillTP2DecodeTP1(t *testing.T) {
	c := transferCase(t, clusterOpts{prefill: side{2, 16}, decode: side{1, 16}}, 70)
	assert.Equal(t, uint64(2), c.cons[0].Stats().Transfers, "one READ per prefill rank")
}

func TestPrefillTP1DecodeTP2(t *testing.T) {
	c := transferCase(t, clusterOpts{prefill: side{1, 16}, decode: side{2, 16}}, 70)
	for i, cn := range c.cons {
		assert.Equal(t, uint64(1), cn.Stats().Transfers, "decode rank %d", i)
	}
}

func TestBlockSizes16And32(t *testing.T) {
	t.Run("prefill16-decode32", func(t *testing.T) {
		transferCase(t, clusterOpts{prefill: side{1, 16}, decode: side{1, 32}}, 90)
	})
	t.Run("prefill32-decode16", func(t *testing.T) {
		transferCase(t, clusterOpts{prefill: side{1, 32}, decode: side{1, 16}}, 90)
	})
	t.Run("prefill32-tp2-decode16-tp1", func(t *testing.T) {
		transferCase(t, clusterOpts{prefill: side{2, 32}, decode: side{1, 16}}, 90)
	})
}

func TestInlineHappyPath(t *testing.T) {
	c := transferCase(t, clusterOpts{
		prefill:   side{2, 16},
		decode:    side{2, 16},
		decodeCfg: func(c *Config) { c.Inline = true },
	}, 50)
	for _, cn := range c.cons {
		assert.Equal(t, uint64(1), cn.Stats().Transfers)
	}
}

func TestPrefixHitNotificationOnly(t *testing.T) {
	c := newCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{1, 16}})
	p := c.finish("req-1", blocksFrom(0, 4))
	c.load("dreq-1", p, nil)
	require.NoError(t, c.result("dreq-1")[0].Err)
	freed := c.freed(1)
	assert.Equal(t, map[string]int{"req-1": 1}, freed[0])
	assert.Equal(t, map[string]int{"req-1": 1}, freed[1])
	assert.Equal(t, uint64(0), c.cons[0].Stats().Transfers)
	assert.Equal(t, uint64(0), c.fab.Counters().Posted, "no READ for a full prefix hit")
}

func TestPartialPrefixHit(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	pblocks := blocksFrom(0, 5) // 80 tokens
	c.fill(3, pblocks, 80)
	p := c.finish("req-1", pblocks)
	// Decode holds the first 2 blocks already; it loads tokens 32..79.
	dblocks := []int{40, 41, 42}
	c.load("dreq-1", p, dblocks)
	require.NoError(t, c.result("dreq-1")[0].Err)
	c.verify(3, dblocks, 32, 80)
	assert.Equal(t, uint64(48*4*8*4), c.cons[0].Stats().Bytes)
	c.freed(1)
}

func TestManyConcurrentRequestsEachEndOnce(t *testing.T) {
	const n = 1000
	c := newCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{2, 16}})
	for i := 0; i < n; i++ {
		// Blocks are shared between requests: the test checks accounting,
		// the byte-exact tests check content.
		p := c.finish(fmt.Sprintf("req-%d", i), []int{i % testBlocks, (i + 1) % testBlocks})
		local := []int{(i * 3) % testBlocks, (i*3 + 1) % testBlocks}
		if i%10 == 0 {
			local = nil // some prefix hits
		}
		c.load(fmt.Sprintf("dreq-%d", i), p, local)
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
	}
	settle()
	for r, cn := range c.cons {
		assert.Empty(t, cn.Drain(), "decode rank %d: no extra result", r)
		assert.Equal(t, 0, cn.Pending())
		assert.Equal(t, uint64(900), cn.Stats().Transfers)
	}
	for _, p := range c.prods {
		assert.Empty(t, p.DrainFreed())
		assert.Equal(t, uint64(0), p.Stats().UnknownNotifications)
	}
}

func TestDuplicateLoadRefused(t *testing.T) {
	c := newCluster(t, clusterOpts{decodeCfg: func(c *Config) { c.Inline = true }})
	p := c.finish("req-1", []int{1})
	// The first load waits for the handshake, which runs on its own
	// goroutine, so the request is still live when the second call comes.
	require.NoError(t, c.cons[0].Load("d", p, []int{2}))
	err := c.cons[0].Load("d", p, []int{2})
	assert.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, `request "d" is already loading`)
	require.NoError(t, c.result("d")[0].Err)
	assert.Equal(t, uint64(1), c.cons[0].Stats().Transfers)
}

func TestLoadRejectsBadArguments(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	p := c.finish("req-1", []int{1})
	err := c.cons[0].Load("d", p, []int{testBlocks})
	assert.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, "localBlocks[0] is 64, layout has 64 blocks")
	bad := p
	bad.RemotePort = 0
	assert.ErrorContains(t, c.cons[0].Load("d", bad, nil), "Params.RemotePort is 0")
	bad = p
	bad.TransferMode = "push"
	err = c.cons[0].Load("d", bad, nil)
	assert.ErrorIs(t, err, connector.ErrIncompatible)
	assert.ErrorContains(t, err, `transfer mode mismatch: local "pull", remote "push"`)
	assert.Equal(t, 0, c.cons[0].Pending())
	v, _ := c.cons[0].Stats().Get("rejected_loads")
	assert.Equal(t, uint64(3), v)
	_, err = c.prods[0].RequestFinished("x,y", nil)
	assert.ErrorContains(t, err, `request id "x,y"`)
	_, err = c.prods[0].RequestFinished("req-1", nil)
	assert.ErrorContains(t, err, `request "req-1" is already held`)
}
