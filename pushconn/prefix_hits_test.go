package pushconn

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
)

// TestPrefixHitBlocks counts each decode rank's prefix-hit blocks per
// KV-cache group, exactly, for registrations that give withTokens:
// groupReqs' requests (at decode block size 16: 70 tokens with the first
// full block held, 5 tokens with none, 40 tokens all held: 3 full blocks
// and the 2 holding its window), one whose two groups' hits differ, and
// then a refused registration and one without withTokens, which count
// nothing.
func TestPrefixHitBlocks(t *testing.T) {
	for _, c := range []struct {
		shape string
		want  []connector.GroupCount
	}{
		{"swa", []connector.GroupCount{{Group: 0, Kind: "full", Value: 1 + 3 + 2}, {Group: 1, Kind: "sliding_window", Value: 2 + 2}}},
		{"hybrid", []connector.GroupCount{{Group: 0, Kind: "full", Value: 1 + 3 + 2}, {Group: 1, Kind: "ssm", Value: 0}}},
	} {
		t.Run(c.shape, func(t *testing.T) {
			g, err := newGroupRig(t, c.shape, 2, 16, 2, 16, false)
			require.NoError(t, err)
			g.withTokens = true
			for _, cn := range g.consumers {
				assert.Equal(t, []connector.GroupCount{{Group: 0, Kind: c.want[0].Kind}, {Group: 1, Kind: c.want[1].Kind}}, cn.Stats().PrefixHitBlocks)
			}
			for i, r := range groupReqs(c.shape, 16, 16) {
				g.push(string(rune('a'+i)), i+1, r, i%2 == 0)
			}
			r := groupReq{tokens: 70, src: [][]int{blocksFrom(1, 5), blocksFrom(10, 3)}, dst: [][]int{blocksFrom(20, 3), {30}}}
			if c.shape == "hybrid" {
				r.src[1], r.dst[1] = []int{9}, []int{3}
			}
			g.push("differ", 9, r, true)

			cn := g.consumers[0]
			err = cn.RegisterGroups("refused", Coordinates(g.rig.pre), [][]int{blocksFrom(20, 6), {}}, withTokens(70))
			require.ErrorIs(t, err, connector.ErrInvalid)
			assert.EqualError(t, err, `pushconn: invalid argument: request "refused": Tokens 70: Groups[0] (full): 6 blocks listed, the request's 70 tokens fill 5 blocks of 16 tokens`)
			g.withTokens = false
			g.push("untold", 10, r, true)
			for i, cn := range g.consumers {
				assert.Equal(t, c.want, cn.Stats().PrefixHitBlocks, "decode rank %d", i)
			}
			for _, p := range g.producers {
				assert.Nil(t, p.Stats().PrefixHitBlocks, "prefill counts no prefix hits")
			}
		})
	}
}
