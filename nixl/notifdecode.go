package nixl

import (
	"bytes"
	"unsafe"
)

// notifRef is one notification as the C shim lists it (nixlgo_notif, whose
// layout shim_nixl.go checks it has): the sender's name and the message,
// pointing into C++ strings that the agent's next notifications call
// overwrites. Go reads them in place and keeps only copies.
type notifRef struct {
	from    *byte
	fromLen uintptr
	msg     *byte
	msgLen  uintptr
}

func (r *notifRef) fromBytes() []byte { return unsafe.Slice(r.from, r.fromLen) }
func (r *notifRef) msgBytes() []byte  { return unsafe.Slice(r.msg, r.msgLen) }

// appendNotifs appends the listed notifications to dst, after the messages
// already there, and returns dst (a new map if dst is nil and refs is not
// empty). A run of entries from one sender costs one map lookup and one
// store.
func appendNotifs(dst Notifs, refs []notifRef, d *notifDecoder) Notifs {
	if len(refs) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(Notifs)
	}
	for i := 0; i < len(refs); {
		// A sender's entries are consecutive and share its name's bytes.
		j := i + 1
		for j < len(refs) && refs[j].from == refs[i].from && refs[j].fromLen == refs[i].fromLen {
			j++
		}
		sender := d.name(refs[i].fromBytes())
		msgs := dst[sender]
		if msgs == nil {
			msgs = make([][]byte, 0, j-i)
		}
		for k := i; k < j; k++ {
			msgs = append(msgs, d.msg(refs[k].msgBytes()))
		}
		dst[sender] = msgs
		i = j
	}
	return dst
}

// eachNotif calls fn for every listed notification, in order, with the
// sender interned and a copy of the message.
func eachNotif(refs []notifRef, d *notifDecoder, fn func(from string, msg []byte)) {
	for i := range refs {
		fn(d.name(refs[i].fromBytes()), d.msg(refs[i].msgBytes()))
	}
}

// notifDecoder turns the native agent's notifications, read in place from
// C memory, into Go values without an allocation per delivery:
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
