package match

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"slices"
)

// tombs remembers the registrations paired within the registration TTL, so
// that a duplicate of one (the same sender, request id and transfer id) is
// dropped rather than paired again. There are as many as registrations
// arrive in a TTL (480 s by default), far more than wait at any time, so
// they are kept without a pointer for the collector to trace and without an
// allocation each: by a keyed fingerprint of their identity, with the
// tombstone and its deadline in the slot (a registration's look-up and the
// tombstone its pairing leaves touch the same cache line). Two identities
// share a fingerprint with a chance of about n/2^127 for n tombstones; a
// registration so taken for a duplicate is dropped and ends at decode's
// registration watchdog, as a lost one does.
//
// The table is extendible hashing over fixed chunks: a directory indexed by
// the fingerprint's top bits names chunks of tombChunkSlots slots, each an
// open-addressing table (linear probing from the low bits, deletion by
// shifting back), and a chunk that fills splits into two by its next top
// bit. Growth so allocates only the new chunk and rewrites one chunk, where
// doubling one table would allocate (and page in) twice the memory, leave
// the old table to the collector and stall the owner while it rehashes
// millions of slots.
//
// Expiry is lazy, with no queue of deadlines: a tombstone whose deadline is
// at or before the highest limit expire has been given is gone, skipped by
// look-ups and dropped when its chunk next fills (the chunk splits too
// unless that freed an eighth of it). That removes each tombstone at the same expire call as a queue
// of deadlines would, except one put with a deadline already passed (a
// registration received long before): like a queued one, that lasts until
// an expire reaches its deadline, so those few wait in early.
type tombs struct {
	dir     []*tombChunk // by fp[0]'s top depth bits
	depth   uint
	n       int    // slots in use, tombstones gone but not yet dropped included
	limit   int64  // the highest limit expire was given,
	expired bool   // once it has been given one
	early   []tomb // put with a deadline at or before limit
	scratch []tomb // a rebuild's copy of the chunk it rebuilds
	rebuilt int    // chunks rebuilt, split or not
}

// tombChunkSlots is a chunk's size: 128 KiB of slots, which a split
// rewrites in cache.
const tombChunkSlots = 1 << 12

// fullChunk is the most tombstones a chunk holds, three quarters of its
// slots: probes stay within a few cache lines.
const fullChunk = tombChunkSlots * 3 / 4

// tombChunk is a chunk's header, apart from its slots: headers are small
// objects side by side, where a count at a fixed offset in every 128 KiB
// chunk would fall in one cache set in all of them.
type tombChunk struct {
	slots *[tombChunkSlots]tomb
	n     int
	depth uint  // top bits of fp[0] that all its tombstones share
	first int64 // no deadline in the chunk is earlier
}

func newTombChunk(depth uint) *tombChunk {
	return &tombChunk{slots: new([tombChunkSlots]tomb), depth: depth, first: math.MaxInt64}
}

// fingerprint is 128 bits of keyed hash; fp[1] is never 0, which marks an
// empty tomb slot.
type fingerprint [2]uint64

type tomb struct {
	fp  fingerprint
	seq uint64
	at  int64 // deadline on the matcher's timeline
}

var fpSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// fingerprintOf hashes the identity's fields, the first two preceded by
// their length so that no two identities write the same bytes. An identity
// that fits (almost all: ids are tens of bytes) is laid out on the stack and
// hashed in one call per seed, four times faster than maphash.Hash's
// buffered writes, which take the rest.
func fingerprintOf(id identity) fingerprint {
	var buf [192]byte
	var fp fingerprint
	if len(id.sender)+len(id.key.RequestID)+len(id.key.TransferID)+2*binary.MaxVarintLen64 <= len(buf) {
		n := binary.PutUvarint(buf[:], uint64(len(id.sender)))
		n += copy(buf[n:], id.sender)
		n += binary.PutUvarint(buf[n:], uint64(len(id.key.RequestID)))
		n += copy(buf[n:], id.key.RequestID)
		n += copy(buf[n:], id.key.TransferID)
		fp = fingerprint{maphash.Bytes(fpSeeds[0], buf[:n]), maphash.Bytes(fpSeeds[1], buf[:n])}
	} else {
		fp = fingerprintSlow(id)
	}
	fp[1] |= 1
	return fp
}

// fingerprintSlow is fingerprintOf for identities of any length: the same
// bytes through maphash.Hash, which gives what maphash.Bytes gives.
func fingerprintSlow(id identity) fingerprint {
	var fp fingerprint
	for i, seed := range fpSeeds {
		var h maphash.Hash
		h.SetSeed(seed)
		var l [binary.MaxVarintLen64]byte
		h.Write(l[:binary.PutUvarint(l[:], uint64(len(id.sender)))])
		h.WriteString(id.sender)
		h.Write(l[:binary.PutUvarint(l[:], uint64(len(id.key.RequestID)))])
		h.WriteString(id.key.RequestID)
		h.WriteString(id.key.TransferID)
		fp[i] = h.Sum64()
	}
	return fp
}

// touch reads the first slot that fp's look-up will read and returns a
// word of it, which the caller keeps: the load is issued now, and its
// cache miss (the table holds a tombstone per registration paired in a
// TTL, far more than the caches do) overlaps the work done before get.
func (t *tombs) touch(fp fingerprint) uint64 {
	if len(t.dir) == 0 {
		return 0
	}
	return t.chunk(fp).slots[fp[0]&(tombChunkSlots-1)].fp[1]
}

func (t *tombs) chunk(fp fingerprint) *tombChunk { return t.dir[fp[0]>>(64-t.depth)&(1<<t.depth-1)] }

// find returns fp's chunk and slot, or false and the empty slot that ends
// its probe.
func (t *tombs) find(fp fingerprint) (*tombChunk, int, bool) {
	if len(t.dir) == 0 {
		return nil, 0, false
	}
	c := t.chunk(fp)
	for i := fp[0] & (tombChunkSlots - 1); ; i = (i + 1) & (tombChunkSlots - 1) {
		s := &c.slots[i]
		if s.fp == fp {
			return c, int(i), true
		}
		if s.fp[1] == 0 {
			return c, int(i), false
		}
	}
}

// get returns fp's tombstone. touched is what touch returned, so that the
// compiler keeps that load; a slot that touch found empty ends the probe.
func (t *tombs) get(fp fingerprint, touched uint64) (tomb, bool) {
	for _, x := range t.early {
		if x.fp == fp {
			return x, true
		}
	}
	if touched == 0 {
		return tomb{}, false
	}
	c, i, ok := t.find(fp)
	if !ok || t.gone(c.slots[i].at) {
		return tomb{}, false
	}
	return c.slots[i], true
}

// gone reports whether a tombstone in the table due at at has expired.
func (t *tombs) gone(at int64) bool { return t.expired && at <= t.limit }

func (t *tombs) remove(fp fingerprint) {
	for i, x := range t.early {
		if x.fp == fp {
			t.early = append(t.early[:i], t.early[i+1:]...)
			break
		}
	}
	if c, i, ok := t.find(fp); ok {
		c.removeAt(i)
		t.n--
	}
}

// put leaves a tombstone for fp until at, replacing any earlier one.
func (t *tombs) put(fp fingerprint, seq uint64, at int64) {
	if len(t.early) > 0 {
		t.remove(fp)
	}
	if t.gone(at) {
		t.remove(fp)
		t.early = append(t.early, tomb{fp: fp, seq: seq, at: at})
		return
	}
	if len(t.dir) == 0 {
		t.dir = []*tombChunk{newTombChunk(0)}
	}
	c, i, ok := t.find(fp)
	if !ok && c.n+1 > fullChunk {
		// Drop what has expired, and split if that is not enough: unless
		// the rebuild freed an eighth of the chunk, for one that filled
		// again a few puts later would be rebuilt again and again while
		// tombstones expire one by one.
		limit := fullChunk
		if t.gone(c.first) {
			t.rebuild(c, nil)
			limit = tombChunkSlots * 5 / 8
		}
		for c.n+1 > limit && c.depth < 64 {
			t.split(c, fp)
			c, limit = t.chunk(fp), fullChunk
		}
		c, i, _ = t.find(fp)
	}
	if !ok {
		if c.n+1 == tombChunkSlots {
			// A chunk of tombstones that share all 64 bits of fp[0]
			// cannot split: the keyed hash makes that never happen, and
			// one slot stays empty so that probes end.
			return
		}
		c.n++
		t.n++
	}
	c.slots[i] = tomb{fp: fp, seq: seq, at: at}
	c.first = min(c.first, at)
}

// split moves the tombstones of chunk c, which fp belongs to, whose next
// top bit is 1 to a new chunk, doubling the directory first when c is
// already told apart by all its bits.
func (t *tombs) split(c *tombChunk, fp fingerprint) {
	if c.depth == t.depth {
		dir := make([]*tombChunk, 2*len(t.dir))
		for i, x := range t.dir {
			dir[2*i], dir[2*i+1] = x, x
		}
		t.dir, t.depth = dir, t.depth+1
	}
	c.depth++
	hi := newTombChunk(c.depth)
	t.rebuild(c, hi)
	// c was named by the 2^(depth-old depth) directory entries that start
	// with its old prefix; the upper half of them now name hi.
	shift := t.depth - c.depth
	start := (fp[0] >> (64 - t.depth) &^ (1<<(shift+1) - 1))
	for i := start + 1<<shift; i < start+1<<(shift+1); i++ {
		t.dir[i] = hi
	}
}

// rebuild places chunk c's tombstones again, dropping those gone, and
// moves to hi (when not nil) those whose bit at c's depth is 1.
func (t *tombs) rebuild(c, hi *tombChunk) {
	t.rebuilt++
	t.scratch = t.scratch[:0]
	for _, s := range c.slots {
		if s.fp[1] != 0 && !t.gone(s.at) {
			t.scratch = append(t.scratch, s)
		}
	}
	t.n -= c.n - len(t.scratch)
	*c.slots, c.n, c.first = [tombChunkSlots]tomb{}, 0, math.MaxInt64
	bit := 64 - c.depth
	for _, s := range t.scratch {
		if hi != nil && s.fp[0]>>bit&1 == 1 {
			hi.place(s)
		} else {
			c.place(s)
		}
	}
}

func (c *tombChunk) place(s tomb) {
	i := s.fp[0] & (tombChunkSlots - 1)
	for c.slots[i].fp[1] != 0 {
		i = (i + 1) & (tombChunkSlots - 1)
	}
	c.slots[i] = s
	c.n++
	c.first = min(c.first, s.at)
}

// removeAt is table.removeAt for a chunk's slots.
func (c *tombChunk) removeAt(i int) {
	const mask = tombChunkSlots - 1
	hole := uint64(i)
	for j := (hole + 1) & mask; ; j = (j + 1) & mask {
		s := c.slots[j]
		if s.fp[1] == 0 {
			break
		}
		if home := s.fp[0] & mask; (j-home)&mask < (j-hole)&mask {
			continue
		}
		c.slots[hole] = s
		hole = j
	}
	c.slots[hole] = tomb{}
	c.n--
}

// expire removes the tombstones whose deadline is at or before limit:
// those in the table by raising the limit they are read against, those in
// early at once.
func (t *tombs) expire(limit int64) {
	if !t.expired || limit > t.limit {
		t.limit, t.expired = limit, true
	}
	if len(t.early) > 0 {
		t.early = slices.DeleteFunc(t.early, func(x tomb) bool { return x.at <= limit })
	}
}
