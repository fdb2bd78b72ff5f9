package loopback

import (
	"bytes"
	"sort"

	"github.com/gonixl/gonixl/nixl"
)

// region is one registered range of memory and the backend metadata given
// with it.
type region struct {
	nixl.Desc
	meta []byte
}

// regionSet holds registered regions sorted by device, address and length,
// the order NIXL keeps them in. Duplicates are allowed, as in NIXL, which
// trusts the user not to register the same memory twice.
type regionSet struct {
	rs []region
}

func descLess(a, b nixl.Desc) bool {
	if a.DevID != b.DevID {
		return a.DevID < b.DevID
	}
	if a.Addr != b.Addr {
		return a.Addr < b.Addr
	}
	return a.Len < b.Len
}

// covers reports whether r contains the whole of d on the same device.
func covers(r, d nixl.Desc) bool {
	return r.DevID == d.DevID && r.Addr <= d.Addr && d.Addr-r.Addr <= r.Len && d.Len <= r.Len-(d.Addr-r.Addr)
}

func (s *regionSet) len() int { return len(s.rs) }

// add inserts a region, keeping the order.
func (s *regionSet) add(r region) {
	i := sort.Search(len(s.rs), func(i int) bool { return descLess(r.Desc, s.rs[i].Desc) })
	s.rs = append(s.rs, region{})
	copy(s.rs[i+1:], s.rs[i:])
	s.rs[i] = r
}

// index returns the position of a region equal to d, or -1.
func (s *regionSet) index(d nixl.Desc) int {
	i := sort.Search(len(s.rs), func(i int) bool { return !descLess(s.rs[i].Desc, d) })
	if i < len(s.rs) && s.rs[i].Desc == d {
		return i
	}
	return -1
}

// removeAt deletes the regions at the given positions.
func (s *regionSet) removeAt(idx []int) {
	drop := make(map[int]bool, len(idx))
	for _, i := range idx {
		drop[i] = true
	}
	kept := s.rs[:0]
	for i, r := range s.rs {
		if !drop[i] {
			kept = append(kept, r)
		}
	}
	clear(s.rs[len(kept):])
	s.rs = kept
}

// covering returns a region that contains d, if any.
func (s *regionSet) covering(d nixl.Desc) (region, bool) {
	// The last region that starts at or before d is the likeliest; earlier
	// ones can still cover d when regions overlap.
	i := sort.Search(len(s.rs), func(i int) bool {
		r := s.rs[i].Desc
		if r.DevID != d.DevID {
			return r.DevID > d.DevID
		}
		return r.Addr > d.Addr
	}) - 1
	for ; i >= 0 && s.rs[i].DevID == d.DevID; i-- {
		if covers(s.rs[i].Desc, d) {
			return s.rs[i], true
		}
	}
	return region{}, false
}

// coversAll returns the index of the first descriptor no region contains,
// or -1 when every one is covered.
func (s *regionSet) coversAll(ds []nixl.Desc) int {
	for i, d := range ds {
		if _, ok := s.covering(d); !ok {
			return i
		}
	}
	return -1
}

// metaConflict reports whether r is already present with different metadata,
// which NIXL refuses as an update it does not support.
func (s *regionSet) metaConflict(r region) bool {
	i := s.index(r.Desc)
	return i >= 0 && !bytes.Equal(s.rs[i].meta, r.meta)
}
