package vllmpeer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/examples/vllmpeer"
)

var tpCases = []struct {
	name            string
	prefill, decode int
	n               int // the count in each completion: max(1, D_tp/P_tp)
}{
	{"tp1-to-tp1", 1, 1, 1},
	{"tp2-to-tp1", 2, 1, 1},
	{"tp1-to-tp2", 1, 2, 2},
}

// The peer, as a vLLM decode, pulls from a gonixl prefill in vLLM's
// protocol: the handshake over the ZMQ side channel, READs with vLLM's
// descriptor ids, every byte verified, and the gonixl prefill frees the
// blocks on exactly the completions vLLM's decode sends.
func TestPeerDecodeFromGonixlPrefill(t *testing.T) {
	for _, tc := range tpCases {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric(t)
			pre := newGonixl(t, fab, "prefill", tc.prefill, true)
			dec := newPeer(t, fab, "decode", tc.decode, vllmpeer.ModePull)
			_, toks := prompt(70) // 5 blocks, the last one partly filled
			pblocks, dblocks := blocksFrom(3, 5), blocksFrom(20, 5)
			pre.fill(t, toks, pblocks)
			ps := pre.finish(t, "req-1", pblocks)
			raw, err := json.Marshal(ps)
			require.NoError(t, err)
			prm, err := vllmpeer.ParseParams(raw)
			require.NoError(t, err)

			res, err := dec.Pull(context.Background(), "dreq-1", prm, dblocks)
			require.NoError(t, err)
			assert.False(t, res.FlatBlockIDs, "gonixl writes remote_block_ids as vLLM does, a list per KV-cache group")
			for r := range tc.decode {
				for _, s := range res.Sent[r] {
					assert.Regexp(t, fmt.Sprintf(`=req-1:%d$`, tc.n), s, "decode rank %d", r)
				}
			}
			c := dec.Verify(toks, dblocks)
			require.Zero(t, c.BadBytes, c.First)
			assert.Equal(t, uint64(testModel.RankBytes(1))/uint64(testModel.NumBlocks)*5, c.OKBytes)
			pre.freed(t, "req-1")
		})
	}
}

// A gonixl decode in vLLM's protocol pulls from the peer as a vLLM
// prefill: every byte verified, and each peer rank saw exactly the
// completions vLLM's decode would send, then freed the blocks.
func TestGonixlDecodeFromPeerPrefill(t *testing.T) {
	for _, tc := range tpCases {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric(t)
			pre := newPeer(t, fab, "prefill", tc.prefill, vllmpeer.ModePull)
			dec := newGonixl(t, fab, "decode", tc.decode, false)
			_, toks := prompt(70)
			pblocks, dblocks := blocksFrom(3, 5), blocksFrom(20, 5)
			prm, err := pre.Prefill("req-1", toks, pblocks)
			require.NoError(t, err)
			assert.Equal(t, [][]int{pblocks}, prm.RemoteBlockIDs)
			assert.Nil(t, prm.RemoteBlocksExpiryTime, "a vLLM prefill sends None")
			for _, c := range dec.cons {
				require.NoError(t, c.Load("dreq-1", pullconnParams(t, prm), dblocks))
			}
			for i, r := range dec.results(t, "dreq-1") {
				require.NoError(t, r.Err, "decode rank %d", i)
			}
			dec.verify(t, toks, dblocks)
			require.NoError(t, pre.WaitFreed("req-1", 10*time.Second))
			rep := pre.Report()
			// Each prefill rank is read by max(1, D/P) decode ranks, each of
			// which sends "<id>:<max(1, D/P)>".
			for r := range tc.prefill {
				want := make([]string, tc.n)
				for i := range want {
					want[i] = fmt.Sprintf("req-1:%d", tc.n)
				}
				assert.Equal(t, want, completions(rep, r), "prefill rank %d", r)
			}
			assert.Equal(t, []string{"req-1"}, rep.Freed)
			assert.Empty(t, rep.Expired)
			assert.Empty(t, rep.Held)
			assert.Empty(t, rep.Problems)
		})
	}
}

// A hash mismatch is refused on both sides: the peer's decode names both
// hashes as vLLM's does, and gonixl's decode fails the load with
// ErrIncompatible.
func TestHashMismatch(t *testing.T) {
	const other = "0000000000000000000000000000000000000000000000000000000000000000"
	_, toks := prompt(20)
	t.Run("peer-decode", func(t *testing.T) {
		fab := newFabric(t)
		pre := newGonixl(t, fab, "prefill", 1, true)
		dec := newPeer(t, fab, "decode", 1, vllmpeer.ModePull, func(c *vllmpeer.Config) { c.Hash = other })
		pre.fill(t, toks, []int{1, 2})
		raw, _ := json.Marshal(pre.finish(t, "req-1", []int{1, 2}))
		prm, err := vllmpeer.ParseParams(raw)
		require.NoError(t, err)
		_, err = dec.Pull(context.Background(), "dreq-1", prm, []int{5, 6})
		require.ErrorIs(t, err, vllmpeer.ErrHashMismatch)
		want, _ := newPeerFactors().Hash()
		assert.EqualError(t, err, "NIXL compatibility hash mismatch. Local: "+other+", Remote: "+want)
	})
	t.Run("gonixl-decode", func(t *testing.T) {
		fab := newFabric(t)
		pre := newPeer(t, fab, "prefill", 1, vllmpeer.ModePull, func(c *vllmpeer.Config) { c.Hash = other })
		dec := newGonixl(t, fab, "decode", 1, false)
		prm, err := pre.Prefill("req-1", toks, []int{1, 2})
		require.NoError(t, err)
		require.NoError(t, dec.cons[0].Load("dreq-1", pullconnParams(t, prm), []int{5, 6}))
		r := dec.results(t, "dreq-1")[0]
		require.ErrorIs(t, r.Err, connector.ErrIncompatible)
		want, _ := newPeerFactors().Hash()
		assert.Regexp(t, `^pullconn: incompatible engines: engine "prefill" at 127\.0\.0\.1:\d+: engine "prefill" rank 0: vllm: incompatible peer: compatibility hash mismatch: local "`+want+`", remote "`+other+`"$`, r.Err.Error())
	})
	t.Run("push-against-pull", func(t *testing.T) {
		// The transfer mode is a factor: a push engine's hash is not a pull one's.
		fab := newFabric(t)
		pull := newPeer(t, fab, "prefill", 1, vllmpeer.ModePull)
		push := newPeer(t, fab, "decode", 1, vllmpeer.ModePush)
		assert.NotEqual(t, pull.Hash(), push.Hash())
	})
}

func newPeerFactors() vllmpeer.HashFactors {
	return vllmpeer.HashFactors{VLLMVersion: vllmVersion, Model: testModel.Name, DType: "torch." + testModel.DType, NumKVHeads: testModel.KVHeads,
		HeadSize: testModel.HeadDim, NumHiddenLayers: testModel.Layers, AttnBackendName: vllmpeer.DefaultAttnBackend, CacheDType: "auto",
		HMAEnabled: true, TransferMode: vllmpeer.ModePull}
}

// The peer's prefill keeps its lease as vLLM's does: a heartbeat extends it
// to at least 2/3 of a lease ahead, the lease's end frees the blocks, and a
// completion for a request no longer held is reported, not counted.
func TestPeerPrefillLease(t *testing.T) {
	const lease = 600 * time.Millisecond
	fab := newFabric(t)
	pre := newPeer(t, fab, "prefill", 1, vllmpeer.ModePull, func(c *vllmpeer.Config) { c.Lease = lease })
	dec := newPeer(t, fab, "decode", 1, vllmpeer.ModePull)
	_, toks := prompt(20)
	prm, err := pre.Prefill("req-1", toks, []int{1, 2})
	require.NoError(t, err)
	// A prefix hit: no READ, only the completion; it handshakes, so that
	// heartbeats can go out.
	warm, err := pre.Prefill("warm", toks, []int{3, 4})
	require.NoError(t, err)
	_, err = dec.Pull(context.Background(), "dwarm", warm, nil)
	require.NoError(t, err)
	require.NoError(t, pre.WaitFreed("warm", 5*time.Second))

	time.Sleep(lease / 2)
	require.NoError(t, dec.Heartbeat("prefill", []string{"req-1", "unknown"}))
	time.Sleep(lease*2/3 - 100*time.Millisecond) // past the first lease's end, within the extension
	rep := pre.Report()
	assert.Equal(t, []string{"req-1"}, rep.Held)
	assert.Equal(t, 1, rep.Heartbeats["req-1"])
	require.Eventually(t, func() bool { return len(pre.Report().Expired) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"req-1"}, pre.Report().Expired)

	// The READ of an expired request still lands (vLLM's prefill cannot
	// tell), but its completion is a problem the peer reports.
	_, err = dec.Pull(context.Background(), "dreq-1", prm, []int{7, 8})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(pre.Report().Problems) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"rank 0: completion \"req-1:1\" for a request not held"}, pre.Report().Problems)
	assert.Equal(t, []string{"warm:1", "HB:req-1,unknown", "req-1:1"}, pre.Report().Notifs[0])
}

// A deadline in the params (a gonixl prefill sends its lease's end on its
// side channel's clock) is mapped through the handshake's clock offset;
// within vLLM's 5 s safety margin the peer declines the READ.
func TestPeerDecodeExpiry(t *testing.T) {
	fab := newFabric(t)
	pre := newGonixl(t, fab, "prefill", 1, true)
	dec := newPeer(t, fab, "decode", 1, vllmpeer.ModePull)
	_, toks := prompt(20)
	pre.fill(t, toks, []int{1, 2})
	raw, _ := json.Marshal(pre.finish(t, "req-1", []int{1, 2}))
	prm, err := vllmpeer.ParseParams(raw)
	require.NoError(t, err)
	require.NotNil(t, prm.RemoteBlocksExpiryTime)
	soon := *prm.RemoteBlocksExpiryTime - 27 // 3 s left of the 30 s lease
	prm.RemoteBlocksExpiryTime = &soon
	_, err = dec.Pull(context.Background(), "dreq-1", prm, []int{5, 6})
	require.ErrorIs(t, err, vllmpeer.ErrExpired)
}

// The peer requires, as vLLM does for non-MLA models, the prefill's
// kv_cache_layout to be its own, and refuses the load with both named: a
// peer set to the legacy name refuses a gonixl prefill that publishes
// vLLM's enum name (its default).
func TestPeerDecodeLayoutMismatch(t *testing.T) {
	fab := newFabric(t)
	pre := newGonixl(t, fab, "prefill", 1, true)
	dec := newPeer(t, fab, "decode", 1, vllmpeer.ModePull, func(c *vllmpeer.Config) { c.KVLayout = "HND" })
	_, toks := prompt(20)
	pre.fill(t, toks, []int{1, 2})
	raw, _ := json.Marshal(pre.finish(t, "req-1", []int{1, 2}))
	prm, err := vllmpeer.ParseParams(raw)
	require.NoError(t, err)
	_, err = dec.Pull(context.Background(), "dreq-1", prm, []int{5, 6})
	assert.EqualError(t, err, `vllmpeer: prefill tp 0: kv_cache_layout is "LBHNC", this engine's is "HND"`)
}

// A decode that has the first blocks cached loads only the rest: vLLM's
// decode end-trims the prefill's list to its own count, and gonixl's
// agrees, both ways.
func TestPrefixHit(t *testing.T) {
	_, toks := prompt(70)
	pblocks, dblocks := blocksFrom(3, 5), blocksFrom(40, 3) // decode had blocks 0 and 1 of the request
	t.Run("peer-decode", func(t *testing.T) {
		fab := newFabric(t)
		pre := newGonixl(t, fab, "prefill", 2, true)
		dec := newPeer(t, fab, "decode", 1, vllmpeer.ModePull)
		pre.fill(t, toks, pblocks)
		raw, _ := json.Marshal(pre.finish(t, "req-1", pblocks))
		prm, err := vllmpeer.ParseParams(raw)
		require.NoError(t, err)
		_, err = dec.Pull(context.Background(), "dreq-1", prm, dblocks)
		require.NoError(t, err)
		c := dec.VerifyFrom(toks, dblocks, 2)
		require.Zero(t, c.BadBytes, c.First)
		require.NotZero(t, c.OKBytes)
		pre.freed(t, "req-1")
	})
	t.Run("gonixl-decode", func(t *testing.T) {
		fab := newFabric(t)
		pre := newPeer(t, fab, "prefill", 1, vllmpeer.ModePull)
		dec := newGonixl(t, fab, "decode", 2, false)
		prm, err := pre.Prefill("req-1", toks, pblocks)
		require.NoError(t, err)
		for _, c := range dec.cons {
			require.NoError(t, c.Load("dreq-1", pullconnParams(t, prm), dblocks))
		}
		for i, r := range dec.results(t, "dreq-1") {
			require.NoError(t, r.Err, "decode rank %d", i)
		}
		for r, b := range dec.bufs {
			c, err := vllmpeer.CheckKVFrom(b.Bytes(), testModel, 2, r, toks, dblocks, 2)
			require.NoError(t, err)
			require.Zero(t, c.BadBytes, "rank %d: %s", r, c.First)
		}
		require.NoError(t, pre.WaitFreed("req-1", 10*time.Second))
		assert.Equal(t, []string{"req-1:2", "req-1:2"}, completions(pre.Report(), 0))
	})
}
