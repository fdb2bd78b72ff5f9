package stats

// GroupValue is one KV-cache group's value of a per-group counter in a
// Snapshot: the group's kind ("full", "sliding_window", "mla", "ssm") and
// its count; its index is its position.
type GroupValue struct {
	Kind  string
	Value uint64
}

// groupCounters are the per-KV-cache-group counters of a decode rank.
type groupCounters struct {
	kinds     []string
	prefixHit []Counter
}

// SetGroups gives the set one prefix-hit counter per KV-cache group of the
// rank's layout, kinds in group order. Call it once, at construction,
// before the set is shared: the list is not guarded.
func (s *Set) SetGroups(kinds []string) {
	s.groups = groupCounters{kinds: append([]string(nil), kinds...), prefixHit: make([]Counter, len(kinds))}
}

// AddPrefixHits adds each group's prefix-hit blocks (hits[i] for group i);
// groups beyond those SetGroups registered are ignored.
func (s *Set) AddPrefixHits(hits []int) {
	for i, n := range hits {
		if i < len(s.groups.prefixHit) && n > 0 {
			s.groups.prefixHit[i].Add(uint64(n))
		}
	}
}

// prefixHits returns the per-group values, nil without groups.
func (s *Set) prefixHits() []GroupValue {
	if len(s.groups.kinds) == 0 {
		return nil
	}
	out := make([]GroupValue, len(s.groups.kinds))
	for i, k := range s.groups.kinds {
		out[i] = GroupValue{Kind: k, Value: s.groups.prefixHit[i].Load()}
	}
	return out
}
