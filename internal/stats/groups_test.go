package stats

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPrefixHitBlocks(t *testing.T) {
	s := New()
	assert.Nil(t, s.Snapshot().PrefixHitBlocks, "no groups registered")
	s.SetGroups([]string{"full", "sliding_window"})
	assert.Equal(t, []GroupValue{{"full", 0}, {"sliding_window", 0}}, s.Snapshot().PrefixHitBlocks)
	l, logs := newTestLogger(s)
	s.AddPrefixHits([]int{4, 2})
	s.AddPrefixHits([]int{1, 0, 9}) // a third group is not the rank's: ignored
	assert.Equal(t, []GroupValue{{"full", 5}, {"sliding_window", 2}}, s.Snapshot().PrefixHitBlocks)
	l.tick()
	s.AddPrefixHits([]int{0, 3})
	l.tick()
	l.tick() // no hit: no line
	require.Equal(t, 2, logs.Len())
	// The line shows each interval's hits, in group order.
	assert.Contains(t, logs.All()[0].Message, ", Num notifs after expiry=0, gonixl.prefix_hit_blocks=5,2")
	assert.Contains(t, logs.All()[1].Message, ", Num notifs after expiry=0, gonixl.prefix_hit_blocks=0,3")
	assert.Equal(t, []any{uint64(0), uint64(3)}, logs.All()[1].ContextMap()["gonixl.prefix_hit_blocks"])
	assert.Equal(t, []GroupValue{{"full", 5}, {"sliding_window", 5}}, s.Snapshot().PrefixHitBlocks, "Stats count since start")
}
