package descriptors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMapRequestErrors(t *testing.T) {
	eq := func() (*Layout, *Layout) { return small(2, 2, 0, 1, 1000, 2000), small(2, 2, 0, 1, 5000, 6000) }
	tests := []struct {
		name     string
		src, dst *Layout
		req      Request
		msg      string
	}{
		{"source id out of range", nil, nil, Request{SrcBlocks: []int{0, 8}, DstBlocks: []int{0, 1}},
			"descriptors: source block id 8 at index 1 out of range [0, 8)"},
		{"negative destination id", nil, nil, Request{SrcBlocks: []int{0, 1}, DstBlocks: []int{-1, 1}},
			"descriptors: destination block id -1 at index 0 out of range [0, 8)"},
		{"destination id twice", nil, nil, Request{SrcBlocks: []int{0, 1, 2}, DstBlocks: []int{3, 4, 3}},
			"descriptors: destination block id 3 appears twice (again at index 2)"},
		{"negative prefix", nil, nil, Request{SrcBlocks: []int{0}, DstBlocks: []int{0}, DstCached: -1},
			"descriptors: DstCached -1 is negative"},
		{"destination longer", nil, nil, Request{SrcBlocks: []int{0}, DstBlocks: []int{0, 1}},
			"descriptors: block lists do not cover the same tokens: source 1 blocks of 2 tokens (tokens 1..2), destination 0 cached + 2 blocks of 2 tokens (tokens 3..4)"},
		{"source longer", nil, nil, Request{SrcBlocks: []int{0, 1, 2}, DstBlocks: []int{0, 1}},
			"descriptors: block lists do not cover the same tokens: source 3 blocks of 2 tokens (tokens 5..6), destination 0 cached + 2 blocks of 2 tokens (tokens 3..4)"},
		{"prefix past the source", nil, nil, Request{SrcBlocks: []int{0, 1}, DstBlocks: []int{0}, DstCached: 2},
			"descriptors: block lists do not cover the same tokens: source 2 blocks of 2 tokens (tokens 3..4), destination 2 cached + 1 blocks of 2 tokens (tokens 5..6)"},
		{"source blocks missing", nil, nil, Request{SrcBlocks: nil, DstBlocks: []int{0}},
			"descriptors: block lists do not cover the same tokens: source 0 blocks of 2 tokens (tokens -1..0), destination 0 cached + 1 blocks of 2 tokens (tokens 1..2)"},
		{
			// 4-token source blocks: 2 of them hold 5..8 tokens; 5
			// destination blocks of 2 tokens hold 9..10.
			"ratio: destination too long", small(4, 2, 0, 1, 1000, 2000), small(2, 2, 0, 1, 5000, 6000),
			Request{SrcBlocks: []int{0, 1}, DstBlocks: []int{0, 1, 2, 3, 4}},
			"descriptors: block lists do not cover the same tokens: source 2 blocks of 4 tokens (tokens 5..8), destination 0 cached + 5 blocks of 2 tokens (tokens 9..10)",
		},
		{
			"no common head", small(2, 1, 1, 2, 1000, 2000), small(2, 1, 0, 2, 5000, 6000),
			Request{SrcBlocks: []int{0}, DstBlocks: []int{0}},
			"descriptors: no KV head in common: source rank 1 holds heads [1, 2), destination rank 0 holds [0, 1); pick the pair with Sources or Targets",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := tc.src, tc.dst
			if src == nil {
				src, dst = eq()
			}
			tr, err := MapRequest(src, dst, tc.req)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tc.msg, err.Error())
			assert.Equal(t, Transfer{}, tr)
			_, st, err := MapCoalesced(src, dst, tc.req)
			assert.Equal(t, tc.msg, err.Error())
			assert.Equal(t, Stats{}, st)
		})
	}
}

func TestDuplicateCheckLargeLayout(t *testing.T) {
	// More blocks than the on-stack bitmap holds.
	src := rankLayout(false, 8, 0, 0, 1)
	dst := rankLayout(false, 8, 0, 0, 1)
	src.NumBlocks, dst.NumBlocks = 100000, 100000
	_, err := Map(src, dst, []int{1, 2, 3}, []int{99999, 5, 99999})
	assert.Equal(t, "descriptors: destination block id 99999 appears twice (again at index 2)", err.Error())
	// Duplicated source ids only read twice: allowed.
	_, err = Map(src, dst, []int{1, 1}, []int{99999, 5})
	assert.NoError(t, err)
}
