package descriptors

import "github.com/gonixl/gonixl/nixl"

// Coalesce merges consecutive pairs whose source ranges and destination
// ranges are both adjacent (same DevID, each starting where the previous one
// ended) into one pair, so that fewer descriptors cross NIXL; the bytes moved
// do not change. Pairs of different regions are never merged, even when the
// regions lie back to back in memory, because NIXL requires every descriptor
// to lie inside one registration: a Transfer from MapRequest, Map or
// MapGroupsRequest remembers where its regions (and groups) start, so
// coalesce the value it returned, unchanged. For a Transfer built by hand the caller vouches for that and any adjacency merges.
// The input is not modified. Coalescing a coalesced Transfer returns it as is.
func Coalesce(t Transfer) (Transfer, Stats) {
	n := t.Len()
	if t.regionPairs < 0 || n != len(t.Dst.Descs) {
		// Already coalesced, or malformed lists that only the caller can
		// fix: pass them on untouched rather than guess.
		return t, Stats{Before: n, After: n}
	}
	if n == 0 {
		t.regionPairs, t.bounds = -1, nil
		return t, Stats{}
	}
	chunk := t.regionPairs
	if chunk == 0 {
		chunk = n
	}
	out := Transfer{
		Src:         nixl.XferList{Mem: t.Src.Mem, Descs: make([]nixl.Desc, 0, n)},
		Dst:         nixl.XferList{Mem: t.Dst.Mem, Descs: make([]nixl.Desc, 0, n)},
		Bytes:       t.Bytes,
		regionPairs: -1,
	}
	next := 0 // the next bound not yet passed, when bounds are set
	for i := 0; i < n; i++ {
		s, d := t.Src.Descs[i], t.Dst.Descs[i]
		start := i%chunk == 0
		if t.bounds != nil {
			start = false
			for next < len(t.bounds) && t.bounds[next] <= i {
				start = start || t.bounds[next] == i
				next++
			}
		}
		if k := len(out.Src.Descs) - 1; !start && k >= 0 && s.Len == d.Len {
			ps, pd := &out.Src.Descs[k], &out.Dst.Descs[k]
			if ps.DevID == s.DevID && pd.DevID == d.DevID && ps.End() == s.Addr && pd.End() == d.Addr && ps.Len == pd.Len {
				ps.Len += s.Len
				pd.Len += d.Len
				continue
			}
		}
		out.Src.Descs = append(out.Src.Descs, s)
		out.Dst.Descs = append(out.Dst.Descs, d)
	}
	return out, Stats{Before: n, After: len(out.Src.Descs)}
}
