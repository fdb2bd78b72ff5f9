package pushconn

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/stats/statsdoc"
)

// The counters docs/push-protocol.md and docs/metrics.md list are the ones
// Stats().Extra holds, name for name and in its order, so that the pages
// cannot drift from the code: a counter added, renamed or moved fails here
// until the pages say so.
func TestDocsListTheExtraCounters(t *testing.T) {
	m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
	staged := stagingRig(t, rigConfig{}, m)
	plain := newRig(t, rigConfig{})
	pre, dec := extraNames(plain.producers[0].Stats()), extraNames(plain.consumers[0].Stats())
	stagedPre, stagedDec := extraNames(staged.producers[0].Stats()), extraNames(staged.consumers[0].Stats())

	// docs/push-protocol.md, "Metrics": every Extra counter of a staging
	// prefill rank, in order; decode has the same but the transfer timing.
	protocol := statsdoc.Names(t, statsdoc.Section(t, "../docs/push-protocol.md", "## Metrics"))
	assert.Equal(t, protocol, stagedPre, "docs/push-protocol.md, Metrics: a staging prefill rank's Extra")
	assert.Equal(t, withoutTiming(protocol), stagedDec, "docs/push-protocol.md, Metrics, less the transfer timing: a staging decode rank's Extra")

	// docs/metrics.md, "Extra counters": push's own counters (decode's
	// Extra without staging), the posting rank's timing counters after them
	// on prefill, and the staging counters last.
	extra := statsdoc.Section(t, "../docs/metrics.md", "## Extra counters")
	push := statsdoc.Names(t, statsdoc.Paragraph(t, extra, "Push, both sides"))
	timing := statsdoc.Names(t, statsdoc.Paragraph(t, extra, "The rank that posts the transfers"))
	// The staging paragraph ends with what only pull's decode adds.
	staging, _, _ := strings.Cut(statsdoc.Paragraph(t, extra, "Staging, on any rank"), "; on pull's")
	stagingNames := statsdoc.Names(t, staging)
	assert.Equal(t, push, dec, "docs/metrics.md, push's counters: a decode rank's Extra")
	assert.Equal(t, statsdoc.Concat(push, timing), pre, "docs/metrics.md, push's then the timing counters: a prefill rank's Extra")
	assert.Equal(t, statsdoc.Concat(push, timing, stagingNames), stagedPre, "docs/metrics.md: a staging prefill rank's Extra")
	assert.Equal(t, statsdoc.Concat(push, stagingNames), stagedDec, "docs/metrics.md: a staging decode rank's Extra")
}

func extraNames(s connector.Stats) []string {
	names := make([]string, len(s.Extra))
	for i, c := range s.Extra {
		names[i] = c.Name
	}
	return names
}

// withoutTiming drops the counters only the rank that posts the transfers has.
func withoutTiming(names []string) []string {
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, "transfers_timed_by_") {
			out = append(out, n)
		}
	}
	return out
}
