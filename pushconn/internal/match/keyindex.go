package match

// keyIndex finds pending entries of one side (registrations or finished
// requests) by the three matching rules, so that both sides look each
// other up the same way. Entries are filed under their stripped id only:
// two ids that are equal have equal stripped ids, so one lookup finds the
// candidates of both id rules, and the exact ones are preferred while
// scanning them. Transfer ids have an index of their own.
type keyIndex[E comparable] struct {
	byTID, byBase index[E]
	n             int // entries indexed
}

func newKeyIndex[E comparable]() keyIndex[E] {
	return keyIndex[E]{byTID: newIndex[E](), byBase: newIndex[E]()}
}

// add indexes e under its key k and the stripped id base.
func (x *keyIndex[E]) add(k Key, base string, e E) {
	if k.TransferID != "" {
		x.byTID.add(k.TransferID, e)
	}
	x.byBase.add(base, e)
	x.n++
}

// addCounted is add for an entry whose stripped id base already files
// sameBase entries, which the caller has just looked up.
func (x *keyIndex[E]) addCounted(k Key, base string, e E, sameBase int) {
	if k.TransferID != "" {
		x.byTID.add(k.TransferID, e)
	}
	x.byBase.addN(base, e, sameBase)
	x.n++
}

// remove undoes add.
func (x *keyIndex[E]) remove(k Key, base string, e E) {
	if k.TransferID != "" {
		x.byTID.remove(k.TransferID, e)
	}
	if x.byBase.remove(base, e) {
		x.n--
	}
}

// find returns the entry that an entry of the other side with key k and
// stripped id base pairs with, by the first rule that finds one, and the
// rule. keyOf gives an entry's key; usable says whether an entry may pair
// (it has not served that sender yet).
func (x *keyIndex[E]) find(k Key, base string, keyOf func(E) Key, usable func(E) bool) (E, Kind) {
	var buf [1]E
	if k.TransferID != "" {
		for _, e := range x.byTID.list(k.TransferID, &buf) {
			if usable(e) {
				return e, ByTransferID
			}
		}
	}
	cands := x.byBase.list(base, &buf)
	for _, e := range cands {
		if ek := keyOf(e); ek.RequestID == k.RequestID && !conflicts(ek, k) && usable(e) {
			return e, ByExactID
		}
	}
	for _, e := range cands {
		if ek := keyOf(e); ek.RequestID != k.RequestID && !conflicts(ek, k) && usable(e) {
			return e, ByStrippedID
		}
	}
	var none E
	return none, 0
}

// byID returns the oldest entry whose request id is id.
func (x *keyIndex[E]) byID(id string, keyOf func(E) Key) (E, bool) {
	var buf [1]E
	for _, e := range x.byBase.list(Base(id), &buf) {
		if keyOf(e).RequestID == id {
			return e, true
		}
	}
	var none E
	return none, false
}

// index maps a key string to the entries that carry it, oldest first. Most
// keys carry one entry, which is kept without a slice of its own: that
// saves an allocation and a pointer for the collector per entry.
type index[E comparable] struct {
	one  map[string]E
	more map[string][]E // keys with two entries or more, never in one
}

func newIndex[E comparable]() index[E] {
	return index[E]{one: map[string]E{}, more: map[string][]E{}}
}

func (ix index[E]) add(k string, e E) {
	if list, ok := ix.more[k]; ok {
		ix.more[k] = append(list, e)
		return
	}
	if first, ok := ix.one[k]; ok {
		delete(ix.one, k)
		ix.more[k] = []E{first, e}
		return
	}
	ix.one[k] = e
}

// addN is add for a key known to carry n entries, which saves the lookups
// that find out.
func (ix index[E]) addN(k string, e E, n int) {
	switch n {
	case 0:
		ix.one[k] = e
	case 1:
		first := ix.one[k]
		delete(ix.one, k)
		ix.more[k] = []E{first, e}
	default:
		ix.more[k] = append(ix.more[k], e)
	}
}

// remove removes e from k's entries and reports whether it was there.
func (ix index[E]) remove(k string, e E) bool {
	if x, ok := ix.one[k]; ok {
		if x != e {
			return false
		}
		delete(ix.one, k)
		return true
	}
	list := ix.more[k]
	for i, x := range list {
		if x != e {
			continue
		}
		list = append(list[:i], list[i+1:]...)
		if len(list) == 1 {
			delete(ix.more, k)
			ix.one[k] = list[0]
		} else {
			ix.more[k] = list
		}
		return true
	}
	return false
}

// list returns k's entries, oldest first; buf holds a single entry so that
// the common case allocates nothing.
func (ix index[E]) list(k string, buf *[1]E) []E {
	if e, ok := ix.one[k]; ok {
		buf[0] = e
		return buf[:]
	}
	return ix.more[k]
}
