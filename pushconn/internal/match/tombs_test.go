package match

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkTombs fails unless every directory entry names a chunk whose
// tombstones all carry the entry's top bits, each chunk's slots are
// reached from their home, and the counts add up.
func checkTombs(t *testing.T, tb *tombs) {
	t.Helper()
	require.Len(t, tb.dir, 1<<tb.depth)
	total := 0
	for i := 0; i < len(tb.dir); {
		c := tb.dir[i]
		require.LessOrEqual(t, c.depth, tb.depth)
		span := 1 << (tb.depth - c.depth)
		require.Zero(t, i%span, "a chunk's directory entries are aligned")
		for j := i; j < i+span; j++ {
			require.Same(t, c, tb.dir[j], "a chunk's directory entries are contiguous")
		}
		prefix := uint64(i) >> (tb.depth - c.depth)
		i += span
		n := 0
		for j, s := range c.slots {
			if s.fp[1] == 0 {
				continue
			}
			n++
			if c.depth > 0 {
				require.Equal(t, prefix, s.fp[0]>>(64-c.depth), "tombstone in the wrong chunk")
			}
			got, k, ok := tb.find(s.fp)
			require.True(t, ok)
			require.Same(t, c, got)
			require.Equal(t, j, k)
		}
		require.Equal(t, n, c.n)
		total += n
	}
	require.Equal(t, total, tb.n)
}

// Fingerprints that share their top bits make a chunk split again and
// again (and the directory double) before they part; every tombstone
// stays found, and expiry removes them in deadline order, each once.
func TestTombsSplitAndExpire(t *testing.T) {
	var tb tombs
	rng := rand.New(rand.NewPCG(5, 6))
	var fps []fingerprint
	for i := range 20_000 {
		fp := fingerprint{rng.Uint64(), rng.Uint64() | 1}
		if i%2 == 0 {
			fp[0] = 0xabc<<52 | fp[0]>>12 // the same top 12 bits
		}
		fps = append(fps, fp)
		tb.put(fp, uint64(i), int64(i))
	}
	checkTombs(t, &tb)
	require.Equal(t, 20_000, tb.n)
	require.GreaterOrEqual(t, tb.depth, uint(12), "the shared bits forced splits down to where they part")
	for i, fp := range fps {
		x, ok := tb.get(fp, tb.touch(fp))
		require.True(t, ok)
		require.Equal(t, uint64(i), x.seq)
	}
	live := func() int {
		n := 0
		for _, fp := range fps {
			if _, ok := tb.get(fp, tb.touch(fp)); ok {
				n++
			}
		}
		return n
	}
	// Replaced: the later deadline holds.
	tb.put(fps[0], 99, 15_000)
	tb.expire(9_999)
	require.Equal(t, 20_000-9_999, live())
	require.Equal(t, 20_000, tb.n, "expired ones stay until their chunk fills")
	x, ok := tb.get(fps[0], tb.touch(fps[0]))
	require.True(t, ok)
	require.Equal(t, uint64(99), x.seq)
	_, ok = tb.get(fps[1], tb.touch(fps[1]))
	require.False(t, ok, "expired")
	_, ok = tb.get(fps[10_000], tb.touch(fps[10_000]))
	require.True(t, ok, "not due yet")
	checkTombs(t, &tb)
	tb.remove(fps[10_000])
	tb.remove(fps[10_000])
	require.Equal(t, 20_000-10_000, live())
	tb.expire(5_000) // a lower limit changes nothing
	require.Equal(t, 20_000-10_000, live())
	tb.expire(15_000)
	require.Equal(t, 20_000-15_001, live(), "the replaced one went at its own deadline")

	// Filling the chunks again drops the expired tombstones instead of
	// splitting them.
	depth, chunks := tb.depth, len(tb.dir)
	for i := range 10_000 {
		fp := fingerprint{rng.Uint64(), rng.Uint64() | 1}
		if i%2 == 0 {
			fp[0] = 0xabc<<52 | fp[0]>>12
		}
		tb.put(fp, 0, int64(30_000+i))
	}
	checkTombs(t, &tb)
	require.Equal(t, depth, tb.depth)
	require.Len(t, tb.dir, chunks, "no split: the expired made room")
	require.Less(t, tb.n, 20_000+10_000, "expired tombstones dropped")
	require.Equal(t, 20_000-15_001, live(), "and none live")

	// A tombstone put with its deadline already passed lasts until an
	// expire reaches that deadline, as a queued one did.
	late := fingerprint{7, 9}
	tb.put(late, 5, 14_000)
	x, ok = tb.get(late, tb.touch(late))
	require.True(t, ok)
	require.Equal(t, uint64(5), x.seq)
	tb.expire(13_999)
	_, ok = tb.get(late, tb.touch(late))
	require.True(t, ok)
	tb.put(late, 6, 14_500) // replaced while early
	tb.expire(14_000)
	x, ok = tb.get(late, tb.touch(late))
	require.True(t, ok)
	require.Equal(t, uint64(6), x.seq)
	tb.expire(14_500)
	_, ok = tb.get(late, tb.touch(late))
	require.False(t, ok)
	require.Empty(t, tb.early)
	tb.put(late, 7, 1<<40) // put again with a deadline ahead: into the table
	require.Empty(t, tb.early)
	_, ok = tb.get(late, tb.touch(late))
	require.True(t, ok)
	tb.expire(1 << 62)
	_, ok = tb.get(late, tb.touch(late))
	require.False(t, ok)
}

// The fingerprint of an identity that fits the stack buffer is what the
// buffered path gives for the same bytes, and length-prefixing keeps
// fields from running into each other.
func TestFingerprintPaths(t *testing.T) {
	id := identity{sender: "d0", key: Key{RequestID: "cmpl-1-0-DEADBEEF", TransferID: "t"}}
	slow := fingerprintSlow(id)
	slow[1] |= 1
	require.Equal(t, slow, fingerprintOf(id))
	require.NotEqual(t, fingerprintOf(identity{sender: "ab", key: Key{RequestID: "c"}}),
		fingerprintOf(identity{sender: "a", key: Key{RequestID: "bc"}}))
	require.NotEqual(t, fingerprintOf(identity{sender: "a", key: Key{RequestID: "b", TransferID: "c"}}),
		fingerprintOf(identity{sender: "a", key: Key{RequestID: "bc"}}))
	long := identity{sender: string(make([]byte, 300)), key: Key{RequestID: "r"}}
	require.NotZero(t, fingerprintOf(long)[1]&1, "the long path marks its slot used too")
	require.Equal(t, fingerprintOf(long), fingerprintOf(long))
}

// In a steady state (tombstones put at a constant rate and expiring a TTL
// later) a chunk is rebuilt once per many puts, not once per few as
// tombstones expire one by one: here 3,000 live tombstones would fill one
// chunk to within 72 slots of full, and rebuilding it would free those
// few; the chunk splits instead.
func TestTombsSteadyStateRebuildsRarely(t *testing.T) {
	var tb tombs
	rng := rand.New(rand.NewPCG(13, 14))
	const ttl, puts = 3_000, 100_000
	for i := range puts {
		now := int64(i)
		tb.put(fingerprint{rng.Uint64(), rng.Uint64() | 1}, 0, now+ttl)
		tb.expire(now)
		if i == puts/2 {
			tb.rebuilt = 0
		}
	}
	require.Equal(t, uint(1), tb.depth, "split once")
	require.LessOrEqual(t, tb.rebuilt, puts/2/512, "rebuilds in the second half")
	require.Greater(t, tb.rebuilt, 0)
	checkTombs(t, &tb)
}
