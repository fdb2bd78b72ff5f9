//go:build nixl

package nixl

// The handle table's part in ReleaseXferReqs, which only the native agent
// has. Each half takes the table's lock once for the whole list.

// claimXfers is the first half of freeing several handles of a serial
// table in one go: it appends to ents, for each of reqs, its live entry
// marked released (so that a repeat of it later in reqs is not found), or
// nil, and returns ents. The caller passes the result to settleXfers once
// NIXL has answered. Serial tables only, where the owner serialises every
// use, so no other call holds an entry.
func (t *handleTable) claimXfers(reqs []XferHandle, ents []*handleEntry) []*handleEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range reqs {
		e := t.m[uint64(h)]
		if e == nil || e.released {
			e = nil
		} else {
			e.released = true
		}
		ents = append(ents, e)
	}
	return ents
}

// settleXfers ends claimXfers: sts holds NIXL's status for each claimed
// (non-nil) entry of ents, in order. A freed entry is forgotten; one NIXL
// kept (its release failed) is live again.
func (t *handleTable) settleXfers(reqs []XferHandle, ents []*handleEntry, sts []Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := 0
	for i, e := range ents {
		if e == nil {
			continue
		}
		s := sts[k]
		k++
		if s.IsError() {
			e.released = false
			continue
		}
		id := uint64(reqs[i])
		delete(t.m, id)
		if t.hotID == id {
			t.hotID, t.hot = 0, nil
		}
	}
}
