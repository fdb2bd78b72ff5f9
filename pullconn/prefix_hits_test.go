package pullconn

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
)

// TestPrefixHitBlocks counts each decode rank's prefix-hit blocks per
// KV-cache group, exactly: groupReqs' requests (at decode block size 16:
// 70 tokens with the first full block held, 5 tokens with none, 40 tokens
// all held: 3 full blocks and the 2 holding its window), one whose two
// groups' hits differ, and a refused load that counts nothing.
func TestPrefixHitBlocks(t *testing.T) {
	for _, c := range []struct {
		shape string
		want  []connector.GroupCount
	}{
		{"swa", []connector.GroupCount{{Group: 0, Kind: "full", Value: 1 + 3 + 2}, {Group: 1, Kind: "sliding_window", Value: 2 + 2}}},
		{"hybrid", []connector.GroupCount{{Group: 0, Kind: "full", Value: 1 + 3 + 2}, {Group: 1, Kind: "ssm", Value: 0}}},
	} {
		t.Run(c.shape, func(t *testing.T) {
			cl, err := newGroupCluster(t, c.shape, side{2, 16}, side{2, 16}, false)
			require.NoError(t, err)
			for _, cn := range cl.cons {
				assert.Equal(t, []connector.GroupCount{{Group: 0, Kind: c.want[0].Kind}, {Group: 1, Kind: c.want[1].Kind}}, cn.Stats().PrefixHitBlocks)
			}
			for i, r := range groupReqs(c.shape, 16, 16) {
				cl.moveGroups(itoa(i), i+1, r)
			}
			// 70 tokens: decode holds 2 of the 5 full blocks, and 2 of
			// the 3 blocks holding the window (or the state slot is
			// listed).
			r := groupReq{tokens: 70, src: [][]int{blocksFrom(1, 5), blocksFrom(10, 3)}, dst: [][]int{blocksFrom(20, 3), {30}}}
			if c.shape == "hybrid" {
				r.src[1], r.dst[1] = []int{9}, []int{3}
			}
			cl.moveGroups("differ", 9, r)
			p, err := cl.prods[0].RequestFinishedGroups("refused", 70, r.src)
			require.NoError(t, err)
			err = cl.cons[0].LoadGroups("refused", p, r.dst[:1])
			require.ErrorIs(t, err, connector.ErrInvalid)
			for i, cn := range cl.cons {
				assert.Equal(t, c.want, cn.Stats().PrefixHitBlocks, "decode rank %d", i)
			}
			for _, pr := range cl.prods {
				assert.Nil(t, pr.Stats().PrefixHitBlocks, "prefill counts no prefix hits")
			}
		})
	}
}
