package pushconn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
