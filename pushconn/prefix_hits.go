package pushconn

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
