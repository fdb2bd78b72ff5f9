package stats

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPrefixHitBlocks(t *testing.T) {
	s := New()
	assert.Nil(t, s.Snapshot().PrefixHitBlocks, "no groups registered")
	assert.NotContains(t, s.Snapshot().LogLine(), "prefix_hit_blocks")
	s.SetGroups([]string{"full", "sliding_window"})
	before := s.Snapshot()
	assert.Equal(t, []GroupValue{{"full", 0}, {"sliding_window", 0}}, before.PrefixHitBlocks)
	s.AddPrefixHits([]int{4, 2})
	s.AddPrefixHits([]int{1, 0, 9}) // a third group is not the rank's: ignored
	snap := s.Snapshot()
	assert.Equal(t, []GroupValue{{"full", 5}, {"sliding_window", 2}}, snap.PrefixHitBlocks)
	assert.True(t, strings.HasSuffix(snap.LogLine(), " prefix_hit_blocks=5,2"), snap.LogLine())
	assert.True(t, changed(snap, before))
	assert.False(t, changed(snap, s.Snapshot()))
	f := snap.Fields()
	assert.Equal(t, "prefix_hit_blocks", f[len(f)-1].Key)
}
