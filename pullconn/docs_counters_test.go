package pullconn

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/stats/statsdoc"
)

// The counters docs/metrics.md lists for pull's ranks are the ones
// Stats().Extra holds, name for name and in its order: a counter added,
// renamed or moved fails here until the page says so.
func TestDocsListTheExtraCounters(t *testing.T) {
	plain := newCluster(t, clusterOpts{})
	m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
	staged := stagedCluster(t, clusterOpts{}, m)

	extra := statsdoc.Section(t, "../docs/metrics.md", "## Extra counters")
	timing := statsdoc.Names(t, statsdoc.Paragraph(t, extra, "The rank that posts the transfers"))
	decode := statsdoc.Names(t, statsdoc.Paragraph(t, extra, "Pull's decode rank"))
	prefill := statsdoc.Names(t, statsdoc.Paragraph(t, extra, "Pull's prefill rank"))
	staging := statsdoc.Names(t, statsdoc.Paragraph(t, extra, "Staging, on any rank"))

	assert.Equal(t, statsdoc.Concat(decode, timing), extraNames(plain.cons[0].Stats()), "docs/metrics.md: a decode rank's Extra")
	assert.Equal(t, prefill, extraNames(plain.prods[0].Stats()), "docs/metrics.md: a prefill rank's Extra")
	// The staging paragraph ends with what only pull's decode adds.
	assert.Equal(t, statsdoc.Concat(decode, timing, staging), extraNames(staged.cons[0].Stats()), "docs/metrics.md: a staging decode rank's Extra")
	assert.Equal(t, statsdoc.Concat(staging[:len(staging)-2], prefill), extraNames(staged.prods[0].Stats()), "docs/metrics.md: a staging prefill rank's Extra")
}

func extraNames(s connector.Stats) []string {
	names := make([]string, len(s.Extra))
	for i, c := range s.Extra {
		names[i] = c.Name
	}
	return names
}
