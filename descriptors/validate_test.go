package descriptors

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

// manyRegions returns a layout of layers layers whose regions (64 bytes
// each) are laid out in reverse order, 128 bytes apart, on device 0.
func manyRegions(layers int) *Layout {
	l := &Layout{Mem: nixl.DRAM, NumLayers: layers, NumBlocks: 1, BlockSize: 4, KVHeads: 2, HeadBytes: 8,
		DType: "bfloat16", TPSize: 1}
	n := l.NumRegions()
	for i := 0; i < n; i++ {
		l.Regions = append(l.Regions, Region{Base: uint64(n-i) * 128})
	}
	return l
}

func TestValidateManyRegions(t *testing.T) {
	l := manyRegions(MaxLayers)
	require.NoError(t, l.Validate())

	// The first and the last region in index order are neighbours once
	// sorted by address: the overlap must still be found, and named by
	// index in ascending order.
	l.Regions[len(l.Regions)-1].Base = l.Regions[0].Base + 32
	l.Regions[0].Base = l.Regions[len(l.Regions)-1].Base + 32
	err := l.Validate()
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "Regions[0]")
	assert.Contains(t, err.Error(), "overlap on device 0 (region length 64)")
}

func TestValidateSameBaseOtherDevice(t *testing.T) {
	l := manyRegions(2)
	l.Regions[1] = Region{Base: l.Regions[0].Base, DevID: 1}
	require.NoError(t, l.Validate(), "equal bases on different devices do not overlap")
	l.Regions[1].DevID = 0
	require.True(t, errors.Is(l.Validate(), ErrInvalid))
}

func TestValidateRefusesHostileLayerCount(t *testing.T) {
	l := manyRegions(MaxLayers + 1)
	err := l.Validate()
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "descriptors: NumLayers 16385 is above the limit of 16384", err.Error())
}

// BenchmarkValidateMaxLayers is the cost a peer's largest acceptable layout
// puts on the handshake.
func BenchmarkValidateMaxLayers(b *testing.B) {
	l := manyRegions(MaxLayers)
	for b.Loop() {
		if err := l.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
