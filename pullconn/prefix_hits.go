package pullconn

import (
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/stats"
)

// groupKinds returns the kinds of l's KV-cache groups in order, for the
// per-group counters (connector.Stats.PrefixHitBlocks).
func groupKinds(l *descriptors.Layout) []string {
	gs := l.GroupList()
	kinds := make([]string, len(gs))
	for i := range gs {
		kinds[i] = string(gs[i].Kind)
	}
	return kinds
}

// countPrefixHits adds an accepted grouped load's prefix-hit blocks to s:
// what each group's decode list leaves out of the request's tokens
// (descriptors.PrefixHits). Lists the mapping will refuse (longer than the
// request) count nothing: that request ends with the mapping's error.
func countPrefixHits(s *stats.Set, l *descriptors.Layout, tokens int, lists [][]int) {
	if hits, err := descriptors.PrefixHits(l, tokens, lists); err == nil {
		s.AddPrefixHits(hits)
	}
}
