package vllmpeer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/vllmpeer"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/pullconn"
)

// swaGroups are the KV-cache groups of testModel played as a
// sliding-window model: layer 0 full attention (group 0), layer 1 a
// sliding window (group 1).
var swaGroups = []int{0, 1}

// newGonixlSWA is newGonixl for testModel as that sliding-window model
// (window 24 tokens): a gonixl pull engine in vLLM's protocol whose ranks'
// layouts have the two groups.
func newGonixlSWA(t *testing.T, fab *loopback.Fabric, id string, tp int) *gonixl {
	t.Helper()
	g := geometry(testModel, tp)
	g.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 1}, {Kind: descriptors.KindSlidingWindow, Layers: 1, Window: 24}}
	e, err := pullconn.NewEngine(connector.EngineConfig{EngineID: id, Model: testModel.Name, Geometry: g, Protocol: connector.ProtocolVLLM,
		VLLM: connector.VLLM{Version: vllmVersion, AttentionBackend: vllmpeer.DefaultAttnBackend, ConnectorVersion: vllmpeer.ConnectorVersion}, HandshakeTimeout: 2 * time.Second})
	require.NoError(t, err)
	out := &gonixl{e: e, tp: tp}
	var agents []nixl.Agent
	t.Cleanup(func() {
		for _, c := range out.cons {
			c.Close()
		}
		e.Close()
		for _, a := range agents {
			a.Close()
		}
		for _, b := range out.bufs {
			b.Free()
		}
	})
	for r := range tp {
		a, err := fab.NewAgent(fmt.Sprintf("%s-%d", id, r))
		require.NoError(t, err)
		agents = append(agents, a)
		buf, err := nixl.AllocBuffer(int(g.RankBytes()))
		require.NoError(t, err)
		out.bufs = append(out.bufs, buf)
		l, err := g.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
		require.NoError(t, err)
		c, err := pullconn.NewConsumer(e, pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}})
		require.NoError(t, err)
		out.cons = append(out.cons, c)
	}
	return out
}

// TestGonixlDecodeFromPeerPrefillGroups: a gonixl decode in vLLM's
// protocol pulls a sliding-window model's request from the peer as a vLLM
// prefill, which publishes region_group_ids [0, 1] and hands out
// remote_block_ids with one list per group (the window's blocks only in
// group 1); decode has the first full-attention block cached. Every byte
// of both groups is verified on every decode rank, and each peer rank saw
// vLLM's completions and freed the request.
func TestGonixlDecodeFromPeerPrefillGroups(t *testing.T) {
	for _, tc := range tpCases {
		t.Run(tc.name, func(t *testing.T) {
			fab := newFabric(t)
			pre := newPeer(t, fab, "prefill", tc.prefill, vllmpeer.ModePull, func(c *vllmpeer.Config) { c.Groups = swaGroups })
			dec := newGonixlSWA(t, fab, "decode", tc.decode)
			_, toks := prompt(70) // 5 blocks; the window's 24 tokens (46..69) lie in blocks 2..4
			pblocks := [][]int{blocksFrom(3, 5), blocksFrom(30, 3)}
			dblocks := [][]int{blocksFrom(20, 4), blocksFrom(40, 3)}
			prm, err := pre.PrefillGroups("req-1", toks, pblocks)
			require.NoError(t, err)
			assert.Equal(t, pblocks, prm.RemoteBlockIDs)
			assert.Equal(t, 70, prm.RemoteNumTokens)
			for _, c := range dec.cons {
				require.NoError(t, c.LoadGroups("dreq-1", pullconnParams(t, prm), dblocks))
			}
			for i, r := range dec.results(t, "dreq-1") {
				require.NoError(t, r.Err, "decode rank %d", i)
			}
			var ok uint64
			for r, b := range dec.bufs {
				c, err := vllmpeer.CheckKVGroups(b.Bytes(), testModel, tc.decode, r, toks, swaGroups, dblocks)
				require.NoError(t, err)
				require.Zero(t, c.BadBytes, "decode rank %d: %s", r, c.First)
				ok += c.OKBytes
			}
			// Every rank's heads together: 4 full-attention blocks and 3
			// window blocks of 16 tokens, 4 heads x 16 bytes each.
			assert.Equal(t, uint64((4+3)*16*testModel.KVHeads*2*testModel.HeadDim*testModel.ElemBytes), ok)
			require.NoError(t, pre.WaitFreed("req-1", 10*time.Second))
			rep := pre.Report()
			for r := range tc.prefill {
				want := make([]string, tc.n)
				for i := range want {
					want[i] = fmt.Sprintf("req-1:%d", tc.n)
				}
				assert.Equal(t, want, completions(rep, r), "prefill rank %d", r)
			}
			assert.Empty(t, rep.Problems)
		})
	}
}

// The peer's grouped calls refuse what it does not play, naming it.
func TestPeerGroupsRefused(t *testing.T) {
	fab := newFabric(t)
	_, err := vllmpeer.New(vllmpeer.Config{EngineID: "p", Model: testModel, VLLMVersion: vllmVersion, Groups: []int{0, 2},
		NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
	assert.EqualError(t, err, "vllmpeer: Config.Groups names no layer of group 1")
	pre := newPeer(t, fab, "prefill", 1, vllmpeer.ModePull, func(c *vllmpeer.Config) { c.Groups = swaGroups })
	_, toks := prompt(20)
	_, err = pre.PrefillGroups("a", toks, [][]int{{1, 2}})
	assert.EqualError(t, err, "vllmpeer: 1 block-id lists, the model has 2 KV-cache groups")
	_, err = pre.PrefillGroups("a", toks, [][]int{{1, 2, 3}, {4}})
	assert.EqualError(t, err, "vllmpeer: group 0 lists 3 blocks, more than 20 tokens fill")
}
