package pullconn

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/nixl"
)

// newVLLMGroupCluster is newGroupCluster in vLLM's protocol with each
// side's block order (descriptors.Layout.Order, "" or NHD) set on its
// ranks, and on the layouts the checks read.
func newVLLMGroupCluster(t *testing.T, shape string, prefill, decode side, porder, dorder string) *cluster {
	t.Helper()
	c, err := newGroupClusterOpts(t, shape, prefill, decode, groupOpts{vllm: true,
		prefillCfg: func(cfg *Config) { cfg.Layout.Order = porder },
		decodeCfg:  func(cfg *Config) { cfg.Layout.Order = dorder }})
	require.NoError(t, err)
	for i := range c.playouts {
		c.playouts[i].Order = porder
	}
	for i := range c.dlayouts {
		c.dlayouts[i].Order = dorder
	}
	return c
}

// TestGroupsPullVLLM moves grouped requests in vLLM's protocol (the ranks'
// metadata carries region_group_ids, per-region block_lens and ssm_sizes
// over vLLM's side channel, the Params remote_block_ids as a list per
// group and remote_num_tokens): a sliding-window model and a hybrid
// attention + Mamba model at TP 2->2, 2->1, 1->2 and block sizes equal and
// different, head-major (HND) and token-major (NHD) blocks on both sides
// and one of each, every decode byte checked (the request's tokens and
// state where the model places them, and the whole memory against the
// mapping), and every prefill rank freeing the request after version 12's
// completion count.
func TestGroupsPullVLLM(t *testing.T) {
	nhd := descriptors.OrderNHD
	for _, shape := range grouptest.Shapes {
		for _, tc := range []struct {
			p, d           side
			porder, dorder string
		}{
			{side{2, 16}, side{2, 16}, "", ""}, {side{2, 16}, side{1, 16}, "", ""}, {side{1, 16}, side{2, 16}, "", ""},
			{side{2, 16}, side{2, 8}, "", ""}, {side{1, 8}, side{2, 16}, "", ""},
			{side{2, 16}, side{2, 16}, nhd, nhd}, {side{2, 16}, side{1, 16}, nhd, nhd}, {side{1, 16}, side{2, 16}, nhd, ""}, {side{2, 16}, side{1, 8}, "", nhd},
		} {
			name := fmt.Sprintf("%s/tp%d-bs%d-%s_to_tp%d-bs%d-%s", shape, tc.p.tp, tc.p.bs, orderName(tc.porder), tc.d.tp, tc.d.bs, orderName(tc.dorder))
			t.Run(name, func(t *testing.T) {
				c := newVLLMGroupCluster(t, shape, tc.p, tc.d, tc.porder, tc.dorder)
				for i, cn := range c.cons {
					want := max(1, tc.d.tp/tc.p.tp)
					assert.Equal(t, want, cn.rd.completionN(&pairing{payload: &handshake.Payload{TPSize: tc.p.tp}}), "decode rank %d", i)
				}
				for i, r := range groupReqs(shape, tc.p.bs, tc.d.bs) {
					c.moveGroups(fmt.Sprintf("req-%d", i), i+1, r)
				}
				for i, cn := range c.cons {
					v, _ := cn.Stats().Get("confirmations")
					assert.Zero(t, v, "decode rank %d asked for no pin", i)
				}
			})
		}
	}
}

func orderName(o string) string {
	if o == "" {
		return descriptors.OrderHND
	}
	return o
}

// A decode rank whose model differs from the prefill's in a size vLLM's
// metadata carries is refused at its first request, naming the field: here
// the decode's SSM state is larger than the prefill's, so the prefill's
// ssm_sizes disagree with the decode's model.
func TestGroupsPullVLLMOtherModel(t *testing.T) {
	c, err := newGroupClusterOpts(t, "hybrid", side{1, 16}, side{1, 16}, groupOpts{vllm: true})
	require.NoError(t, err)
	params, err := c.prods[0].RequestFinishedGroups("a", 20, [][]int{{1, 2}, {3}})
	require.NoError(t, err)
	// The decode engine reads the prefill's metadata with its own geometry:
	// swap it for one whose conv state is twice as large.
	other := grouptest.Geometry("hybrid", 1, 16)
	other.KVPacked = true
	(*other.Groups)[1].Conv = []int{48, 16, 16}
	d, err := NewEngine(connector.EngineConfig{EngineID: "decode-2", Model: "m", Geometry: other, Protocol: connector.ProtocolVLLM,
		VLLM: connector.VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	a, err := c.fab.NewAgent("decode-2-0")
	require.NoError(t, err)
	buf, err := nixl.AllocBuffer(int(other.RankBytes()))
	require.NoError(t, err)
	l, err := other.Layout(nixl.DRAM, 0, buf.RegDesc().Desc)
	require.NoError(t, err)
	cn, err := NewConsumer(d, Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cn.Close() })
	require.NoError(t, cn.LoadGroups("x", params, [][]int{{4, 5}, {6}}))
	var res connector.Result
	deadline := time.Now().Add(20 * time.Second)
	for res.RequestID == "" {
		require.True(t, time.Now().Before(deadline), "no result for x")
		if rs := cn.Drain(); len(rs) > 0 {
			require.Len(t, rs, 1)
			res = rs[0]
		}
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, "x", res.RequestID)
	require.ErrorIs(t, res.Err, connector.ErrIncompatible)
	assert.ErrorContains(t, res.Err, "ssm_sizes is [40 32], Groups[1] (ssm) of the model's geometry gives [80 32] at TP size 1")
}

// TestGroupsPullVLLMMambaTokens: a Mamba hybrid's 70-token prompt moves as
// vLLM moves it, 69 tokens (connector.VLLMTransferTokens): the lists cover them and
// remote_num_tokens says so; a sliding-window model's moves whole.
func TestGroupsPullVLLMMambaTokens(t *testing.T) {
	for shape, want := range map[string]int{"hybrid": 69, "swa": 70} {
		c := newVLLMGroupCluster(t, shape, side{2, 16}, side{1, 16}, "", "")
		tokens := connector.VLLMTransferTokens(c.playouts[0], 70)
		require.Equal(t, want, tokens, shape)
		ids := func(first, n int) []int {
			out := make([]int, n)
			for i := range out {
				out[i] = first + i
			}
			return out
		}
		r := groupReq{tokens: tokens, src: [][]int{ids(1, 5)}, dst: [][]int{ids(15, 4)}}
		if shape == "hybrid" {
			r.src, r.dst = append(r.src, []int{9}), append(r.dst, []int{3})
		} else {
			r.src, r.dst = append(r.src, ids(10, 3)), append(r.dst, ids(24, 3)) // tokens 46..69
		}
		c.moveGroups("req-m", 5, r)
	}
}

// TestGroupsPullVLLMReplicatedHeads: a hybrid of one KV head at prefill TP
// 2, where both prefill ranks hold the one head and each half of the SSM
// state. vLLM's decode reads the attention from one of them and the state
// from both (compute_tp_mapping's source ranks per group, their union
// read and notified: nixl/tp_mapping.py at
// 4b5c627c23e6690b8987100d1cbf78e34ac14bf9, pull_worker.py's
// _read_blocks_for_req), each notification counting the decode ranks that
// read that prefill rank; so does gonixl's, and every prefill rank frees the
// request once, after its one completion. The reverse (decode TP 2) counts
// 2.
func TestGroupsPullVLLMReplicatedHeads(t *testing.T) {
	for _, tc := range []struct{ p, d side }{{side{2, 16}, side{1, 16}}, {side{1, 16}, side{2, 16}}, {side{2, 16}, side{2, 16}}} {
		c := newVLLMGroupCluster(t, "hybrid-1kv", tc.p, tc.d, "", "")
		for i, cn := range c.cons {
			assert.Equal(t, max(1, tc.d.tp/tc.p.tp), cn.rd.completionN(&pairing{payload: &handshake.Payload{TPSize: tc.p.tp}}), "decode rank %d", i)
		}
		for i, r := range groupReqs("hybrid", tc.p.bs, tc.d.bs) {
			c.moveGroups(fmt.Sprintf("req-%d", i), i+1, r)
		}
	}
}

// A grouped model in vLLM's protocol needs vLLM's hybrid KV-cache manager
// (the hash's is_hma_enabled): with DisableHMA the engine is refused.
func TestGroupsPullVLLMNeedsHMA(t *testing.T) {
	g := grouptest.Geometry("swa", 1, 16)
	g.KVPacked = true
	_, err := NewEngine(connector.EngineConfig{EngineID: "p", Model: "m", Geometry: g, Protocol: connector.ProtocolVLLM, ListenAddr: "127.0.0.1:0",
		VLLM: connector.VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN", DisableHMA: true}})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.ErrorContains(t, err, "EngineConfig.VLLM.DisableHMA is set with 2 KV-cache groups (Geometry.Groups)")
}
