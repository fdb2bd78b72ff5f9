package match

// keyIndex finds pending entries of one side (registrations or finished
// requests) by the three matching rules, so that both sides look each
// other up the same way.
type keyIndex[E comparable] struct {
	byTID, byID, byBase index[E]
}

func newKeyIndex[E comparable]() keyIndex[E] {
	return keyIndex[E]{byTID: index[E]{}, byID: index[E]{}, byBase: index[E]{}}
}

// add indexes e under its key k and the stripped id base.
func (x keyIndex[E]) add(k Key, base string, e E) {
	if k.TransferID != "" {
		x.byTID.add(k.TransferID, e)
	}
	x.byID.add(k.RequestID, e)
	x.byBase.add(base, e)
}

// remove undoes add.
func (x keyIndex[E]) remove(k Key, base string, e E) {
	if k.TransferID != "" {
		x.byTID.remove(k.TransferID, e)
	}
	x.byID.remove(k.RequestID, e)
	x.byBase.remove(base, e)
}

// find returns the entry that an entry of the other side with key k and
// stripped id base pairs with, by the first rule that finds one, and the
// rule. keyOf gives an entry's key; usable says whether an entry may pair
// (it has not served that sender yet).
func (x keyIndex[E]) find(k Key, base string, keyOf func(E) Key, usable func(E) bool) (E, Kind) {
	if k.TransferID != "" {
		for _, e := range x.byTID[k.TransferID] {
			if usable(e) {
				return e, ByTransferID
			}
		}
	}
	for _, e := range x.byID[k.RequestID] {
		if !conflicts(keyOf(e), k) && usable(e) {
			return e, ByExactID
		}
	}
	for _, e := range x.byBase[base] {
		if !conflicts(keyOf(e), k) && usable(e) {
			return e, ByStrippedID
		}
	}
	var none E
	return none, 0
}
