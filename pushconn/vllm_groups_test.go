package pushconn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
)

// newVLLMGroupRig is newGroupRig in vLLM's protocol with each side's
// block order (descriptors.Layout.Order, "" or NHD) on its ranks and on
// the layouts the checks read.
func newVLLMGroupRig(t *testing.T, shape string, ptp, pbs, dtp, dbs int, porder, dorder string) *groupRig {
	t.Helper()
	g, err := newGroupRigOpts(t, shape, ptp, pbs, dtp, dbs, groupRigOpts{vllm: true,
		preRank: func(c *Config) { c.Layout.Order = porder },
		decRank: func(c *Config) { c.Layout.Order = dorder }})
	require.NoError(t, err)
	for i := range g.rig.preLayout {
		g.rig.preLayout[i].Order = porder
	}
	for i := range g.rig.decLayout {
		g.rig.decLayout[i].Order = dorder
	}
	return g
}

// TestGroupsPushVLLM moves grouped requests in vLLM's protocol (metadata
// with region_group_ids, per-region block_lens and ssm_sizes over vLLM's
// side channel; PUSH_REG's local_block_ids a list per group, vLLM's 11
// keys; the plain "<id>:<prefill TP>" completions, pp_size * max(1,
// prefill TP / decode TP) of them per decode rank): a sliding-window model
// and a hybrid attention + Mamba model at TP 2->2, 2->1, 1->2, block sizes
// equal and different, registration first and finish first, HND and NHD
// on both sides and one of each, every decode byte checked and every
// prefill rank freeing the request once.
func TestGroupsPushVLLM(t *testing.T) {
	nhd := descriptors.OrderNHD
	for _, shape := range grouptest.Shapes {
		for _, tc := range []struct {
			ptp, pbs, dtp, dbs int
			porder, dorder     string
		}{
			{2, 16, 2, 16, "", ""}, {2, 16, 1, 16, "", ""}, {1, 16, 2, 16, "", ""}, {2, 16, 2, 8, "", ""}, {1, 8, 2, 16, "", ""},
			{2, 16, 2, 16, nhd, nhd}, {2, 16, 1, 16, nhd, nhd}, {1, 16, 2, 16, "", nhd}, {2, 8, 1, 16, nhd, ""},
		} {
			name := fmt.Sprintf("%s/tp%d-bs%d-%s_to_tp%d-bs%d-%s", shape, tc.ptp, tc.pbs, orderName(tc.porder), tc.dtp, tc.dbs, orderName(tc.dorder))
			t.Run(name, func(t *testing.T) {
				g := newVLLMGroupRig(t, shape, tc.ptp, tc.pbs, tc.dtp, tc.dbs, tc.porder, tc.dorder)
				for i, r := range groupReqs(shape, tc.pbs, tc.dbs) {
					g.push(fmt.Sprintf("req-%d", i), i+1, r, i%2 == 0)
				}
				for i, p := range g.producers {
					v, _ := p.Stats().Get("push_fail_withheld")
					assert.Zero(t, v, "prefill rank %d", i)
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

// TestGroupsPushVLLMMambaTokens: a Mamba hybrid's 70-token prompt moves as
// vLLM moves it, 69 tokens (connector.VLLMTransferTokens); a sliding-window model's
// moves whole.
func TestGroupsPushVLLMMambaTokens(t *testing.T) {
	for shape, want := range map[string]int{"hybrid": 69, "swa": 70} {
		g := newVLLMGroupRig(t, shape, 2, 16, 1, 16, "", "")
		tokens := connector.VLLMTransferTokens(g.rig.preLayout[0], 70)
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
		g.push("req-m", 5, r, true)
	}
}

// TestGroupsPushVLLMReplicatedHeads: a hybrid of one KV head at prefill TP
// 2 (both prefill ranks hold the head, each half of the SSM state): both
// write into a TP 1 decode rank, which counts vLLM's pp_size * max(1,
// prefill TP / decode TP) = 2 completions; TP 1 -> 2 and 2 -> 2 too.
func TestGroupsPushVLLMReplicatedHeads(t *testing.T) {
	for _, tc := range []struct{ ptp, dtp int }{{2, 1}, {1, 2}, {2, 2}} {
		g := newVLLMGroupRig(t, "hybrid-1kv", tc.ptp, 16, tc.dtp, 16, "", "")
		for i, r := range groupReqs("hybrid", 16, 16) {
			g.push(fmt.Sprintf("req-%d", i), i+1, r, i%2 == 0)
		}
	}
}
