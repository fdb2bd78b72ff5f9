package match

// slab keeps entries of one kind in one slice, named by their slot there
// (from 1: 0 names none), so that indexes and deadline queues refer to them
// by a uint32 instead of a pointer and a freed slot is reused instead of
// allocated again. A slot's generation changes each time it is freed, so a
// queued deadline that names an older generation is known to be stale.
// Slots move when the slice grows: hold their numbers, not their
// addresses, across an alloc.
type slab[E any] struct {
	items []E
	gen   []uint32
	free  []uint32
}

// alloc returns a free slot, holding a zero E.
func (s *slab[E]) alloc() uint32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	if len(s.items) == 0 {
		var zero E
		s.items, s.gen = append(s.items, zero), append(s.gen, 0) // slot 0 names none
	}
	var zero E
	s.items, s.gen = append(s.items, zero), append(s.gen, 0)
	return uint32(len(s.items) - 1)
}

// release zeroes slot i (so the collector does not keep what it held) and
// frees it under a new generation.
func (s *slab[E]) release(i uint32) {
	var zero E
	s.items[i] = zero
	s.gen[i]++
	s.free = append(s.free, i)
}

// ref names slot i's current generation in a due.
func (s *slab[E]) ref(i uint32) uint64 { return uint64(s.gen[i])<<32 | uint64(i) }

// slotOf returns the slot that ref names, or false when it has been freed
// since.
func (s *slab[E]) slotOf(ref uint64) (uint32, bool) {
	i := uint32(ref)
	return i, int(i) < len(s.items) && s.gen[i] == uint32(ref>>32)
}
