package descriptors

// PrefixHits returns, for each KV-cache group of l ([Layout.GroupList]
// order), how many logical blocks of a request of tokens tokens the
// group's list in lists leaves out at the front because the rank already
// holds them: a prefix-cache hit, which may differ from group to group
// (each list is a suffix of the request, see [GroupRequest]).
//
//   - full and MLA attention: the request's blocks (tokens over the
//     group's logical block size, rounded up) minus the listed ones;
//   - sliding window: the blocks holding the window (the request's last
//     Window tokens, as the mapping reads it) minus the listed ones, and
//     none when the list covers the window: blocks before the window are
//     left out for the window's sake, not for a hit;
//   - SSM: 0, the state slot moves whole or not at all.
//
// A list longer than the request's blocks of its group, a tokens below 0,
// or a list count other than the layout's groups is an error matching
// [ErrInvalid] that names the group.
func PrefixHits(l *Layout, tokens int, lists [][]int) ([]int, error) {
	groups := l.GroupList()
	switch {
	case tokens < 0:
		return nil, invalidf("PrefixHits: tokens is %d, want >= 0", tokens)
	case len(lists) != len(groups):
		return nil, invalidf("PrefixHits: %d lists, the layout has %d KV-cache groups", len(lists), len(groups))
	}
	out := make([]int, len(groups))
	for i := range groups {
		g := &groups[i]
		if g.Kind == KindSSM {
			continue
		}
		logical := g.blockSize(l) * g.ratio()
		n := ceilDiv(tokens, logical)
		if len(lists[i]) > n {
			return nil, invalidf("Groups[%d] (%s): %d blocks listed, the request's %d tokens fill %d blocks of %d tokens",
				i, g.Kind, len(lists[i]), tokens, n, logical)
		}
		held := n
		if g.Kind == KindSlidingWindow {
			held = n - max(0, tokens-g.Window)/logical
		}
		out[i] = max(0, held-len(lists[i]))
	}
	return out, nil
}
