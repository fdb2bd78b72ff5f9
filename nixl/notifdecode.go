package nixl

import "bytes"

// notifDecoder turns the native agent's encoded notifications, read in
// place from C memory, into Go values without an allocation per delivery:
// sender names are interned, and small messages are copied into slices
// carved from a shared block (a slab) rather than allocated one by one.
// A message keeps its block alive, which is why only small messages go
// there: a retained message pins at most slabSize bytes.
//
// Used by one goroutine at a time (the agent's notification lock).
type notifDecoder struct {
	names    map[string]string // interned sender names
	lastName string            // the name returned last
	slab     []byte            // what is left of the current block
}

const (
	// maxInternedNames bounds the cache of sender names; past it names are
	// allocated per call, which is only slower.
	maxInternedNames = 4096
	// slabSize is the size of one block of message copies.
	slabSize = 1024
	// slabMaxMsg is the largest message copied into a block; larger ones
	// get their own allocation.
	slabMaxMsg = 128
)

// name returns the interned string for a sender name.
func (d *notifDecoder) name(b []byte) string {
	// Most deliveries come from the sender of the previous one.
	if string(b) == d.lastName {
		return d.lastName
	}
	s, ok := d.names[string(b)]
	if !ok {
		s = string(b)
		if d.names == nil {
			d.names = make(map[string]string)
		}
		if len(d.names) < maxInternedNames {
			d.names[s] = s
		}
	}
	d.lastName = s
	return s
}

// msg returns a Go copy of m that aliases no other message: its capacity
// is its length, so appending to it cannot overwrite the next one.
func (d *notifDecoder) msg(m []byte) []byte {
	n := len(m)
	switch {
	case n == 0:
		return []byte{}
	case n > slabMaxMsg:
		return bytes.Clone(m)
	}
	if len(d.slab) < n {
		d.slab = make([]byte, slabSize)
	}
	out := d.slab[:n:n]
	copy(out, m)
	d.slab = d.slab[n:]
	return out
}
