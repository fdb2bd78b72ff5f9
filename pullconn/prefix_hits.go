package pullconn

import "github.com/gonixl/gonixl/descriptors"

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
