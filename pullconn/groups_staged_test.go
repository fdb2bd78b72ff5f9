package pullconn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
)

// TestGroupsPullStaged moves grouped requests through staging slots: each
// prefill rank gathers every group's listed blocks into its slot (the
// group image), each decode rank reads the parts it needs and scatters
// them into its groups' blocks. Every byte is checked as in
// TestGroupsPull, and every load went through the slots on both sides.
func TestGroupsPullStaged(t *testing.T) {
	for _, shape := range grouptest.Shapes {
		for _, tc := range []struct{ p, d side }{
			{side{2, 16}, side{2, 16}}, {side{2, 16}, side{1, 16}}, {side{1, 16}, side{2, 16}}, {side{2, 16}, side{2, 8}},
		} {
			t.Run(fmt.Sprintf("%s/tp%d-bs%d_to_tp%d-bs%d", shape, tc.p.tp, tc.p.bs, tc.d.tp, tc.d.bs), func(t *testing.T) {
				m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
				c, err := newGroupClusterOpts(t, shape, tc.p, tc.d, groupOpts{
					prefillCfg: m.rank("prefill", func(rc *Config) { rc.ParamsAfterAllRanks = true }),
					decodeCfg:  m.rank("decode", nil),
				})
				require.NoError(t, err)
				reqs := groupReqs(shape, tc.p.bs, tc.d.bs)
				reqs = reqs[:len(reqs)-1] // the last lists nothing on decode: nothing to stage
				for i, r := range reqs {
					c.moveGroups(fmt.Sprintf("req-%d", i), i+1, r)
				}
				for _, p := range c.prods {
					require.EqualValues(t, len(reqs), extraCount(t, p.Stats(), "staged_transfers"), "prefill gathers")
				}
				for i, cn := range c.cons {
					require.Positive(t, extraCount(t, cn.Stats(), "staged_transfers"), "decode rank %d read no slot", i)
				}
				pre, dec := slotsInUse(c)
				require.Zero(t, pre+dec, "slots back")
			})
		}
	}
}
