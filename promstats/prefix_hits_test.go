package promstats

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/stats"
)

// The per-group prefix-hit counter is one series per KV-cache group,
// labelled with the group's index and kind.
func TestCollectorPrefixHits(t *testing.T) {
	set := stats.New()
	set.SetGroups([]string{"full", "sliding_window", "ssm"})
	set.AddPrefixHits([]int{3, 1, 0})
	set.AddPrefixHits([]int{2, 0, 0})
	fams := gather(t, New(setSource{set}, Options{Namespace: "gonixl"}))
	f := fams["gonixl_nixl_prefix_hit_blocks_total"]
	require.NotNil(t, f)
	got := map[string]float64{}
	for _, m := range f.GetMetric() {
		var group, kind string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "group":
				group = l.GetValue()
			case "kind":
				kind = l.GetValue()
			}
		}
		got[group+"/"+kind] = m.GetCounter().GetValue()
	}
	assert.Equal(t, map[string]float64{"0/full": 5, "1/sliding_window": 1, "2/ssm": 0}, got)

	// A rank without groups (prefill) exports no series of it.
	_, ok := gather(t, New(setSource{stats.New()}, Options{Namespace: "gonixl"}))["gonixl_nixl_prefix_hit_blocks_total"]
	assert.False(t, ok)
}
