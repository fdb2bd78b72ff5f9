package pullconn

import "github.com/gonixl/gonixl/descriptors"

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

// prefixHits returns a grouped load's prefix-hit blocks per group: what
// each group's decode list leaves out of the request's tokens
// (descriptors.PrefixHits). Lists the mapping will refuse (longer than the
// request) give none: that request ends with the mapping's error.
func prefixHits(l *descriptors.Layout, tokens int, lists [][]int) []int {
	hits, err := descriptors.PrefixHits(l, tokens, lists)
	if err != nil {
		return nil
	}
	return hits
}
