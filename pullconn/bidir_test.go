package pullconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Turn geometry of the tests: turn 1's prompt is 40 tokens, decode
// generates 24 more, so the history is 64 tokens (4 blocks of 16); turn 2
// adds 36 new tokens (100 in all).
const (
	turn1Prompt = 40
	history     = 64
	turn2Prompt = 100
)

// turnOne runs turn 1 of conversation seed (prefill computes its prompt,
// decode reads it and generates the rest of the history) and exports the
// history from decode. It returns the export's Params and decode's blocks.
func (c *bidirCluster) turnOne(seed int, id string) (Params, []int) {
	c.t.Helper()
	pblocks := blocksFrom(0, 3)
	write(c.pbufs, c.playouts, seed, pblocks, 0, turn1Prompt)
	p := c.finishTurn(id+"-t1", pblocks)
	bs := c.dlayouts[0].BlockSize
	dblocks := blocksFrom(20, (history+bs-1)/bs)
	for _, cn := range c.cons {
		require.NoError(c.t, cn.Load(id+"-t1", p, dblocks[:(turn1Prompt+bs-1)/bs]))
	}
	for i, r := range endOf(c.t, c.cons, id+"-t1") {
		require.NoError(c.t, r.Err, "decode rank %d", i)
	}
	require.NoError(c.t, check(c.dbufs, c.dlayouts, seed, dblocks, 0, turn1Prompt))
	freedBy(c.t, c.prods, id+"-t1")
	write(c.dbufs, c.dlayouts, seed, dblocks, turn1Prompt, history) // decode's own tokens
	return c.export(id+"-t1", dblocks, history), dblocks
}

func TestBidirMultiTurnBytesVerified(t *testing.T) {
	for _, tc := range []struct {
		name            string
		prefill, decode side
	}{
		{"tp1-tp1", side{1, 16}, side{1, 16}},
		{"prefill-tp2-decode-tp1", side{2, 16}, side{1, 16}},
		{"prefill-tp1-decode-tp2", side{1, 16}, side{2, 16}},
		{"prefill-bs16-decode-bs32", side{1, 16}, side{1, 32}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newBidirCluster(t, bidirOpts{prefill: tc.prefill, decode: tc.decode})
			hp, _ := c.turnOne(5, "conv")
			assert.Equal(t, history, hp.NumTokens)
			assert.Equal(t, "decode", hp.RemoteEngineID)

			// Turn 2: prefill reads the history back (D->P) into fresh
			// blocks and computes only the new tokens.
			pblocks := blocksFrom(30, (turn2Prompt+15)/16)
			require.True(t, c.loadHistory("conv-t2", hp, pblocks[:history/16]))
			for i, r := range endOf(t, c.readers, "conv-t2") {
				require.NoError(t, r.Err, "prefill rank %d", i)
			}
			require.NoError(t, check(c.pbufs, c.playouts, 5, pblocks, 0, history), "history read back intact")
			freedBy(t, c.exporters, "conv-t1")
			write(c.pbufs, c.playouts, 5, pblocks, history, turn2Prompt)

			// Decode pulls the new turn as usual (P->D).
			p2 := c.finishTurn("conv-t2", pblocks)
			bs := c.dlayouts[0].BlockSize
			d2 := blocksFrom(40, (turn2Prompt+bs-1)/bs)
			for _, cn := range c.cons {
				require.NoError(t, cn.Load("conv-t2", p2, d2))
			}
			for i, r := range endOf(t, c.cons, "conv-t2") {
				require.NoError(t, r.Err, "decode rank %d", i)
			}
			require.NoError(t, check(c.dbufs, c.dlayouts, 5, d2, 0, turn2Prompt))
			freedBy(t, c.prods, "conv-t2")
			settle()
			for _, ex := range c.exporters {
				assert.Empty(t, ex.DrainFreed(), "released once")
				assert.Equal(t, 0, ex.Held())
				assert.Equal(t, uint64(0), ex.Stats().ExpiredRequests)
			}
			var read uint64
			for _, hr := range c.readers {
				read += hr.Stats().Bytes
			}
			// Every model head of 64 tokens, K and V of 2 layers, 8 bytes.
			assert.Equal(t, uint64(history*testHeads*testHeadBytes*2*testLayers), read)
		})
	}
}

func TestBidirBelowThresholdRecomputesAndReleasesDecode(t *testing.T) {
	c := newBidirCluster(t, bidirOpts{threshold: history + 1})
	assert.Equal(t, history+1, c.readers[0].Threshold())
	hp, _ := c.turnOne(6, "conv")
	posted := c.fab.Counters().Posted
	require.False(t, c.loadHistory("conv-t2", hp, blocksFrom(30, 4)))
	require.NoError(t, endOf(t, c.readers, "conv-t2")[0].Err)
	// Only the completion went: decode frees its blocks now, not at the TTL.
	freedBy(t, c.exporters, "conv-t1")
	assert.Equal(t, posted, c.fab.Counters().Posted, "no READ below the threshold")
	assert.Equal(t, uint64(0), c.readers[0].Stats().Bytes)
}

func TestBidirDefaults(t *testing.T) {
	c := newBidirCluster(t, bidirOpts{})
	assert.Equal(t, DefaultKVRecomputeThreshold, c.readers[0].Threshold())
	assert.Equal(t, historyExpiryMargin, c.readers[0].cfg.ExpiryMargin)
	assert.Equal(t, DefaultDecoderKVBlocksTTL, c.exporters[0].cfg.Lease)
	_, err := NewHistoryReader(c.pe, Config{}, -1)
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, "recompute threshold is -1")
}

func TestBidirExportRefusals(t *testing.T) {
	c := newBidirCluster(t, bidirOpts{})
	ex := c.exporters[0]
	for _, tc := range []struct {
		blocks []int
		tokens int
		want   string
	}{
		{[]int{1, 2}, 0, "numTokens is 0, want 1..32"},
		{[]int{1, 2}, 33, "numTokens is 33, want 1..32"},
		{[]int{1, testBlocks}, 20, "blockIDs[1] is 64"},
	} {
		_, err := ex.ExportTurn("conv-t1", tc.blocks, tc.tokens)
		require.ErrorIs(t, err, connector.ErrInvalid)
		assert.ErrorContains(t, err, tc.want)
		assert.Equal(t, 0, ex.Held(), "a refusal holds nothing")
	}
}

// vLLM's reader declines a history read whose hold ends within 5 s; so does
// a HistoryReader, and the exporter frees the blocks at its TTL.
func TestBidirHistoryNearExpiryDeclined(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(5000, 0))
	c := newBidirCluster(t, bidirOpts{clock: clk, exporterCfg: func(cfg *Config) { cfg.Lease = 60 * time.Second }})
	hp, _ := c.turnOne(7, "conv")
	clk.Advance(56 * time.Second) // 4 s left: inside the 5 s margin
	posted := c.fab.Counters().Posted
	require.True(t, c.loadHistory("conv-t2", hp, blocksFrom(30, 4)))
	r := endOf(t, c.readers, "conv-t2")[0]
	require.ErrorIs(t, r.Err, ErrExpired)
	assert.Equal(t, posted, c.fab.Counters().Posted, "no READ of a hold about to end")
	clk.Advance(5 * time.Second)
	freedBy(t, c.exporters, "conv-t1")
	assert.Equal(t, uint64(1), c.exporters[0].Stats().ExpiredRequests)
}

// A READ that fails in the D->P direction ends the history load with the
// error (prefill recomputes), never done; decode's hold is not completed
// and ends at its TTL, once.
func TestBidirHistoryReadFaults(t *testing.T) {
	for _, kind := range []loopback.FaultKind{loopback.FailInFlight, loopback.FailPost} {
		t.Run(kind.String(), func(t *testing.T) {
			clk := connector.NewManualClock(time.Unix(5000, 0))
			c := newBidirCluster(t, bidirOpts{clock: clk, exporterCfg: func(cfg *Config) { cfg.Lease = 60 * time.Second }})
			hp, _ := c.turnOne(8, "conv")
			_, err := c.fab.AddFault(loopback.Fault{Kind: kind, From: "prefill-0-hist", Status: nixl.StatusBackend})
			require.NoError(t, err)
			require.True(t, c.loadHistory("conv-t2", hp, blocksFrom(30, 4)))
			r := endOf(t, c.readers, "conv-t2")[0]
			require.ErrorIs(t, r.Err, ErrTransfer)
			settle()
			assert.Empty(t, c.exporters[0].DrainFreed(), "no completion for a failed read")
			clk.Advance(61 * time.Second)
			freedBy(t, c.exporters, "conv-t1")
		})
	}
}

// A fault in the P->D direction of a bidirectional pair leaves the D->P
// direction alone, and the other way round.
func TestBidirFaultsInOneDirectionOnly(t *testing.T) {
	c := newBidirCluster(t, bidirOpts{})
	hp, _ := c.turnOne(9, "conv")
	_, err := c.fab.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "decode-0", Status: nixl.StatusBackend})
	require.NoError(t, err)
	pblocks := blocksFrom(30, 7)
	require.True(t, c.loadHistory("conv-t2", hp, pblocks[:4]))
	require.NoError(t, endOf(t, c.readers, "conv-t2")[0].Err)
	require.NoError(t, check(c.pbufs, c.playouts, 9, pblocks, 0, history))
	write(c.pbufs, c.playouts, 9, pblocks, history, turn2Prompt)
	p2 := c.finishTurn("conv-t2", pblocks)
	require.NoError(t, c.cons[0].Load("conv-t2", p2, blocksFrom(40, 7)))
	require.ErrorIs(t, endOf(t, c.cons, "conv-t2")[0].Err, ErrTransfer)
}

func TestBidirAbortBothSides(t *testing.T) {
	clk := connector.NewManualClock(time.Unix(5000, 0))
	c := newBidirCluster(t, bidirOpts{clock: clk, exporterCfg: func(cfg *Config) { cfg.Lease = 60 * time.Second }})
	hp, _ := c.turnOne(10, "conv")
	// The reader aborts a load whose handshake cannot finish (an engine
	// that publishes no rank): the end is the abort, once.
	late, err := NewEngine(connector.EngineConfig{EngineID: "late", Model: "m", Geometry: testGeometry(1, 16), HandshakeTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer late.Close()
	lp := hp
	lp.RemoteEngineID, lp.RemotePort = "late", late.Port()
	require.True(t, c.loadHistory("conv-t2", lp, blocksFrom(30, 4)))
	require.NoError(t, c.readers[0].Abort("conv-t2"))
	r := endOf(t, c.readers, "conv-t2")[0]
	require.ErrorIs(t, r.Err, connector.ErrAborted)
	settle()
	assert.Empty(t, c.readers[0].Drain(), "ended exactly once")
	// The exporter aborts its hold: it is freed at the deadline it
	// advertised, not at once, since a READ may be in flight.
	require.NoError(t, c.exporters[0].Abort("conv-t1"))
	settle()
	assert.Empty(t, c.exporters[0].DrainFreed())
	clk.Advance(61 * time.Second)
	freedBy(t, c.exporters, "conv-t1")
	n, _ := c.exporters[0].Stats().Get("aborted_requests")
	assert.Equal(t, uint64(1), n)
}

// Decode's read guard holds in the D->P direction too: the same history
// cannot be read back twice once its completion went.
func TestBidirHistoryReadTwiceRefused(t *testing.T) {
	c := newBidirCluster(t, bidirOpts{})
	hp, _ := c.turnOne(11, "conv")
	require.True(t, c.loadHistory("conv-t2", hp, blocksFrom(30, 4)))
	require.NoError(t, endOf(t, c.readers, "conv-t2")[0].Err)
	_, err := c.readers[0].LoadHistory("conv-t2-retry", hp, blocksFrom(30, 4))
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, "was already read by this rank")
}
