package match

import "hash/maphash"

// side names one half of the match in a keyIndex.
type side int

const (
	finSide side = iota // finished requests
	regSide             // registrations
)

// keyIndex files the waiting entries of both sides under a string key (a
// stripped request id, or a transfer id), each side's entries of a key in
// arrival order. Both sides share a key's table slot (v heads the
// finished requests, w the registrations), so the one look-up that a
// registration or a finished request makes finds its duplicates on its own
// side and its candidates on the other. Entries are named by their slab
// slot; each side's links array keeps, per slot, the key filed under and
// its hash and the links of a circular list (the oldest entry's prev is the
// newest), so the index reads nothing from the entries and holds one
// pointer per entry (the key) for the collector.
type keyIndex struct {
	t     table
	links [2][]link
	n     [2]int // entries filed per side
}

type link struct {
	key        string
	hash       uint64
	next, prev uint32 // next is 0 after the newest
}

var keySeed = maphash.MakeSeed()

// keyHash is a key's hash in a keyIndex: never 0, which marks an empty
// table slot.
func keyHash(k string) uint64 { return maphash.String(keySeed, k) | 1<<63 }

// lookup returns the oldest entry of each side filed under k, whose hash
// is h (0 where none).
func (x *keyIndex) lookup(k string, h uint64) (fin, reg uint32) {
	if i, ok := x.slotOf(k, h); ok {
		s := &x.t.slots[i]
		return s.v, s.w
	}
	return 0, 0
}

func (x *keyIndex) slotOf(k string, h uint64) (int, bool) {
	for i, ok := x.t.first(h); ok; i, ok = x.t.next(h, i) {
		s := &x.t.slots[i]
		var e link
		if s.v != 0 {
			e = x.links[finSide][s.v]
		} else {
			e = x.links[regSide][s.w]
		}
		if e.key == k {
			return i, true
		}
	}
	return 0, false
}

// head returns the side's head in slot s.
func head(s *slot, sd side) *uint32 {
	if sd == finSide {
		return &s.v
	}
	return &s.w
}

// after returns the entry filed after e on its side under the same key, or 0.
func (x *keyIndex) after(sd side, e uint32) uint32 { return x.links[sd][e].next }

// add files entry e (not 0, not filed on this side) under k, whose hash is
// h, as the side's newest.
func (x *keyIndex) add(sd side, e uint32, k string, h uint64) {
	links := x.links[sd]
	for uint32(len(links)) <= e {
		links = append(links, link{})
	}
	x.links[sd] = links
	links[e] = link{key: k, hash: h}
	x.n[sd]++
	i, ok := x.slotOf(k, h)
	if !ok {
		i = x.t.insert(h, 0, 0)
	}
	hd := head(&x.t.slots[i], sd)
	if *hd == 0 {
		*hd, links[e].prev = e, e
		return
	}
	tail := links[*hd].prev
	links[tail].next, links[e].prev, links[*hd].prev = e, tail, e
}

// remove unfiles entry e from its side; it must be filed there (the
// matcher knows which entries are).
func (x *keyIndex) remove(sd side, e uint32) {
	links := x.links[sd]
	l := links[e]
	i, ok := x.slotOf(l.key, l.hash)
	if !ok {
		return
	}
	s := &x.t.slots[i]
	hd := head(s, sd)
	switch {
	case *hd == e:
		*hd = l.next
		if l.next != 0 {
			links[l.next].prev = l.prev
		}
	default:
		links[l.prev].next = l.next
		if l.next != 0 {
			links[l.next].prev = l.prev
		} else {
			links[*hd].prev = l.prev
		}
	}
	links[e] = link{}
	x.n[sd]--
	if s.v == 0 && s.w == 0 {
		x.t.removeAt(i)
	}
}
