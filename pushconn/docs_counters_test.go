package pushconn

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
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
	protocol := counterNames(t, section(t, "../docs/push-protocol.md", "## Metrics"))
	assert.Equal(t, protocol, stagedPre, "docs/push-protocol.md, Metrics: a staging prefill rank's Extra")
	assert.Equal(t, withoutTiming(protocol), stagedDec, "docs/push-protocol.md, Metrics, less the transfer timing: a staging decode rank's Extra")

	// docs/metrics.md, "Extra counters": push's own counters (decode's
	// Extra without staging), the posting rank's timing counters after them
	// on prefill, and the staging counters last.
	extra := section(t, "../docs/metrics.md", "## Extra counters")
	push := counterNames(t, paragraph(t, extra, "Push, both sides"))
	timing := counterNames(t, paragraph(t, extra, "The rank that posts the transfers"))
	// The staging paragraph ends with what only pull's decode adds.
	staging, _, _ := strings.Cut(paragraph(t, extra, "Staging, on any rank"), "; on pull's")
	stagingNames := counterNames(t, staging)
	assert.Equal(t, push, dec, "docs/metrics.md, push's counters: a decode rank's Extra")
	assert.Equal(t, concat(push, timing), pre, "docs/metrics.md, push's then the timing counters: a prefill rank's Extra")
	assert.Equal(t, concat(push, timing, stagingNames), stagedPre, "docs/metrics.md: a staging prefill rank's Extra")
	assert.Equal(t, concat(push, stagingNames), stagedDec, "docs/metrics.md: a staging decode rank's Extra")
}

func extraNames(s connector.Stats) []string {
	names := make([]string, len(s.Extra))
	for i, c := range s.Extra {
		names[i] = c.Name
	}
	return names
}

// section returns a page's text from the heading to the next heading of
// its level.
func section(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	require.True(t, ok, "%s has no %q", path, heading)
	level := heading[:strings.IndexByte(heading, ' ')+1]
	body, _, _ := strings.Cut(rest, "\n"+level)
	return body
}

// paragraph returns the paragraph of text that begins with start.
func paragraph(t *testing.T, text, start string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n"+start)
	require.True(t, ok, "no paragraph begins %q", start)
	p, _, _ := strings.Cut(rest, "\n\n")
	return p
}

// counterName is a counter's name quoted in a page: `lower_snake_case`.
var counterName = regexp.MustCompile("`([a-z][a-z0-9_]*)`")

// counterNames returns the counter names quoted in text, in order.
func counterNames(t *testing.T, text string) []string {
	t.Helper()
	var names []string
	for _, m := range counterName.FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	require.NotEmpty(t, names, "no counter named in %q", text)
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

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
