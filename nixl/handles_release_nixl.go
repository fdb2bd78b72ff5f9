//go:build nixl

package nixl

// The handle table's part in ReleaseXferReqs, which only the native agent
// has.

// claim is the first half of freeing several handles of a serial table in
// one go (ReleaseXferReqs): it returns id's live entry, marked released so
// that a repeat of id in the same list is not found, or nil. The caller
// passes it to settle once NIXL has answered. Serial tables only, where the
// owner serialises every use, so no other call holds the entry.
func (t *handleTable) claim(id uint64) *handleEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[id]
	if e == nil || e.released {
		return nil
	}
	e.released = true
	return e
}

// settle ends a claim: a freed entry is forgotten, one NIXL kept (its
// release failed) is live again.
func (t *handleTable) settle(id uint64, e *handleEntry, freed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !freed {
		e.released = false
		return
	}
	delete(t.m, id)
	if t.hotID == id {
		t.hotID, t.hot = 0, nil
	}
}
