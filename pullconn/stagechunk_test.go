package pullconn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// TestStagedPullChunks: a staged READ between like blocks is n READs of
// region ranges, none carrying the completion (prefill gets one, after
// every chunk); decode scatters each chunk by itself; the bytes arrive
// whole and the rank's READ counts once, for 1, 2, 3 (uneven) and the
// default (one per region) chunks, with a prefix-cache hit too.
func TestStagedPullChunks(t *testing.T) {
	for _, cached := range []int{0, 1} {
		for _, chunks := range []int{1, 2, 3, 0} {
			t.Run(fmt.Sprintf("cached%d/chunks%d", cached, chunks), func(t *testing.T) {
				m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
				dec := &stagingtest.Copier{}
				m.copier["decode"] = dec
				c := stagedCluster(t, clusterOpts{decodeCfg: func(rc *Config) { rc.Staging.Chunks = chunks }}, m)
				blocks := []int{9, 3, 30, 12}
				c.fill(4, blocks, 64)
				p := c.finish("r", blocks)
				require.NotNil(t, p.RemoteStagingSlot)
				local := []int{5, 40, 7, 22}[cached:]
				// With cached, decode holds the first block already (a
				// prefix-cache hit): it reads the other three.
				before := c.fab.Counters().Posted
				c.load("d", p, local)
				require.NoError(t, c.result("d")[0].Err)
				c.verify(4, local, cached*c.dlayouts[0].BlockSize, 64)
				n := staging.ChunkCount(2*testLayers, chunks)
				require.Equal(t, uint64(n), c.fab.Counters().Posted-before, "one READ per chunk")
				got, _ := dec.Record()
				require.Len(t, got, n, "one scatter per chunk")
				perRegion := uint64(len(local)) * c.dlayouts[0].BlockLen()
				var sum uint64
				for _, b := range got {
					require.Zero(t, b%perRegion, "a scatter is whole regions")
					sum += b
				}
				require.Equal(t, perRegion*uint64(2*testLayers), sum)
				s := c.cons[0].Stats()
				require.Equal(t, uint64(1), extraCount(t, s, "staged_transfers"), "the rank's READ counts once")
				require.Equal(t, uint64(1), s.Transfers, "one transfer recorded")
				require.Equal(t, map[string]int{"r": 1}, c.freed(1)[0], "prefill freed the blocks once, on the completion")
				pre, decSlots := slotsInUse(c)
				require.Zero(t, pre)
				require.Zero(t, decSlots)
			})
		}
	}
}

// TestStagedPullChunkFails: a failed READ or scatter of a later chunk
// fails the load (the scatters before it ran; no result says done), frees
// its slot, and the next request goes through.
func TestStagedPullChunkFails(t *testing.T) {
	for _, step := range []string{"transfer", "scatter"} {
		t.Run(step, func(t *testing.T) {
			m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
			dec := &stagingtest.Copier{}
			if step == "scatter" {
				dec.FailAt = 2
			}
			m.copier["decode"] = dec
			c := stagedCluster(t, clusterOpts{}, m)
			if step == "transfer" {
				_, err := c.fab.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "decode-0", Count: 1})
				require.NoError(t, err)
			}
			blocks := []int{9, 3}
			c.fill(4, blocks, 32)
			p := c.finish("r", blocks)
			c.load("d", p, []int{5, 40})
			err := c.result("d")[0].Err
			if step == "scatter" {
				require.ErrorIs(t, err, connector.ErrStaging)
			} else {
				require.ErrorIs(t, err, ErrTransfer)
			}
			_, decSlots := slotsInUse(c)
			require.Zero(t, decSlots, "decode slot released")
			c.fill(5, []int{20, 22}, 32)
			p = c.finish("y", []int{20, 22})
			c.load("dy", p, []int{30, 33})
			require.NoError(t, c.result("dy")[0].Err)
			c.verify(5, []int{30, 33}, 0, 32)
		})
	}
}

// TestStagedPullSeveralRanksNeedPromise: a prefill engine of two TP ranks
// stages only with Config.ParamsAfterAllRanks; without it the
// Params name no slot and every READ is direct, with the same bytes.
func TestStagedPullSeveralRanksNeedPromise(t *testing.T) {
	for _, promise := range []bool{false, true} {
		t.Run(fmt.Sprintf("promise=%v", promise), func(t *testing.T) {
			m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
			c := stagedCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{1, 16},
				prefillCfg: func(rc *Config) { rc.ParamsAfterAllRanks = promise }}, m)
			blocks := []int{9, 3, 30, 12}
			c.fill(6, blocks, 64)
			p := c.finish("r", blocks)
			c.load("d", p, []int{5, 40, 7, 22})
			require.NoError(t, c.result("d")[0].Err)
			c.verify(6, []int{5, 40, 7, 22}, 0, 64)
			s := c.cons[0].Stats()
			if promise {
				require.NotNil(t, p.RemoteStagingSlot)
				require.Equal(t, uint64(2), extraCount(t, s, "staged_transfers"), "both prefill ranks' slots read")
				require.Zero(t, extraCount(t, s, "direct_transfers"))
			} else {
				require.Nil(t, p.RemoteStagingSlot)
				require.Zero(t, extraCount(t, s, "staged_transfers"))
				require.Equal(t, uint64(2), extraCount(t, s, "direct_transfers"))
			}
			for i, f := range c.freed(1) {
				require.Equal(t, map[string]int{"r": 1}, f, "prefill rank %d", i)
			}
			pre, dec := slotsInUse(c)
			require.Zero(t, pre)
			require.Zero(t, dec)
		})
	}
}

// TestParamsAfterAllRanksAgree: a prefill rank whose ParamsAfterAllRanks
// differs from the engine's other ranks is refused, naming the field.
func TestParamsAfterAllRanksAgree(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	c := stagedCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{1, 16}, prefillCfg: func(rc *Config) {
		rc.ParamsAfterAllRanks = rc.Layout.TPRank == 0
		if rc.Layout.TPRank == 1 {
			// Rank 1 joins below instead, after the cluster built rank 0.
			rc.Staging = connector.Staging{}
		}
	}}, m)
	a, err := c.fab.NewAgent("prefill-extra")
	require.NoError(t, err)
	defer a.Close()
	buf, err := nixl.AllocBuffer(layoutBytes(2, 16))
	require.NoError(t, err)
	defer buf.Free()
	cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: newLayout(buf, 1, 2, 16)}}
	m.rank("prefill", nil)(&cfg)
	_, err = NewProducer(c.pe, cfg)
	require.ErrorIs(t, err, connector.ErrInvalid)
	require.ErrorContains(t, err, "Config.ParamsAfterAllRanks is false; the engine's other ranks have true")
}
