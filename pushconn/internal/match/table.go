package match

// table is an open-addressing hash table from a 64-bit hash (never 0: 0
// marks an empty slot) to two uint32 values for the owner. It stores no
// keys and no pointers: the owner checks that a slot whose hash matches is
// really its key, so several slots may carry one hash (keys whose hashes
// collide). Linear probing from
// the hash's low bits keeps a lookup in one or two cache lines at the load
// kept here (at most one half), deletion shifts the slots that follow back
// (no deleted markers to sweep), and growth walks the old slots in order
// and writes the new ones in two ascending runs.
type table struct {
	slots []slot
	n     int // slots in use
}

type slot struct {
	h    uint64 // 0: empty
	v, w uint32
}

// minSlots is a table's size when it first gets a key.
const minSlots = 16

func (t *table) mask() uint64 { return uint64(len(t.slots) - 1) }

// first returns the first slot from h's home on that holds h, or false
// when an empty slot comes first; next continues after slot i.
func (t *table) first(h uint64) (int, bool) {
	if t.n == 0 {
		return 0, false
	}
	return t.scan(h, h&t.mask())
}

func (t *table) next(h uint64, i int) (int, bool) {
	return t.scan(h, (uint64(i)+1)&t.mask())
}

func (t *table) scan(h, i uint64) (int, bool) {
	mask := t.mask()
	for {
		s := &t.slots[i]
		if s.h == 0 {
			return 0, false
		}
		if s.h == h {
			return int(i), true
		}
		i = (i + 1) & mask
	}
}

// insert adds a slot for h (not 0) and returns it.
func (t *table) insert(h uint64, v, w uint32) int {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	t.n++
	return t.place(slot{h: h, v: v, w: w})
}

func (t *table) place(s slot) int {
	mask := t.mask()
	i := s.h & mask
	for t.slots[i].h != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = s
	return int(i)
}

func (t *table) grow() {
	old := t.slots
	size := 2 * len(old)
	if size < minSlots {
		size = minSlots
	}
	t.slots = make([]slot, size)
	for _, s := range old {
		if s.h != 0 {
			t.place(s)
		}
	}
}

// removeAt empties slot i and moves back the slots after it that their
// probe would no longer reach.
func (t *table) removeAt(i int) {
	mask := t.mask()
	hole := uint64(i)
	for j := (hole + 1) & mask; ; j = (j + 1) & mask {
		s := t.slots[j]
		if s.h == 0 {
			break
		}
		home := s.h & mask
		// The slot stays where it is when its home lies cyclically in
		// (hole, j]: its probe starts after the hole.
		if (j-home)&mask < (j-hole)&mask {
			continue
		}
		t.slots[hole] = s
		hole = j
	}
	t.slots[hole] = slot{}
	t.n--
}
