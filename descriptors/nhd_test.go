package descriptors

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMapPropertyNHD runs the random scenarios of TestMapPropertyRandomLayouts
// with each engine's in-block order drawn at random (HND or NHD): every byte
// of every destination block must hold the right source byte, written once,
// whether the orders agree (direct mapping) or differ (the permuting list).
func TestMapPropertyNHD(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewPCG(24, 2026))
	reused := &Transfer{}
	for i := 0; i < n; i++ {
		sc := randomScenario(rng)
		so, do := pick(rng, "", OrderNHD, OrderHND), pick(rng, "", OrderNHD)
		for _, l := range sc.src {
			l.Order = so
		}
		for _, l := range sc.dst {
			l.Order = do
		}
		if err := checkScenario(sc, reused); err != nil {
			t.Fatalf("case %d (src order %q, dst order %q): %v\n%v", i, so, do, err, sc)
		}
	}
}

// NHD on both sides at equal TP and block size is a whole-block copy; an
// NHD destination fed by an HND source gets one descriptor per token and
// head, each landing at its permuted place.
func TestMapNHDTable(t *testing.T) {
	// 1 layer, K and V; 2 tokens x 2 heads x 4 bytes = 16-byte blocks.
	src, dst := small(2, 2, 0, 1, 1000, 2000), small(2, 2, 0, 1, 5000, 6000)
	src.Order, dst.Order = OrderNHD, OrderNHD
	req := Request{SrcBlocks: []int{3, 4}, DstBlocks: []int{0, 1}}
	tr, st, err := MapCoalesced(src, dst, req)
	require.NoError(t, err)
	assert.Equal(t, pairs{{1048, 5000, 32}, {2048, 6000, 32}}, flatten(tr))
	assert.Equal(t, Stats{Before: 4, After: 2}, st)

	// HND source -> NHD destination, block 3 -> block 0: source head h
	// token t at 48 + h*8 + t*4, destination at (t*2 + h)*4. The
	// destination is written token by token.
	src.Order = OrderHND
	tr, err = MapRequest(src, dst, Request{SrcBlocks: []int{3}, DstBlocks: []int{0}})
	require.NoError(t, err)
	want := pairs{{1048, 5000, 4}, {1056, 5004, 4}, {1052, 5008, 4}, {1060, 5012, 4},
		{2048, 6000, 4}, {2056, 6004, 4}, {2052, 6008, 4}, {2060, 6012, 4}}
	assert.Equal(t, want, flatten(tr))
	c, st := Coalesce(tr)
	assert.Equal(t, want, flatten(c), "no two pieces are adjacent on both sides")
	assert.Equal(t, Stats{Before: 8, After: 8}, st)

	// Across TP sizes on NHD: destination rank 1 of 2 holds head 1, one
	// 4-byte run per token of the source block.
	half := small(2, 1, 1, 2, 5000, 6000)
	half.Order = OrderNHD
	src.Order = OrderNHD
	tr, err = MapRequest(src, half, Request{SrcBlocks: []int{3}, DstBlocks: []int{0}})
	require.NoError(t, err)
	// Destination block 0 (1 head): token t at t*4, so the two runs are
	// adjacent on the destination but not on the source: within the
	// block pair they stay two.
	assert.Equal(t, pairs{{1052, 5000, 4}, {1060, 5004, 4}, {2052, 6000, 4}, {2060, 6004, 4}}, flatten(tr))
}

func TestOrderValidate(t *testing.T) {
	l := small(2, 2, 0, 1, 1000, 2000)
	l.Order = "BHLNC"
	err := l.Validate()
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, `descriptors: Order "BHLNC" is not "HND" or "NHD"`, err.Error())
}
