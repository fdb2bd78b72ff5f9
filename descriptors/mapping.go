package descriptors

import "errors"

var errNotImplemented = errors.New("descriptors: not implemented")

// Map pairs srcBlocks (on src) with dstBlocks (on dst) for one source rank and
// one destination rank, with no prefix hit, one descriptor pair per region and
// block (per head where the block sizes differ and a rank holds several
// heads). It is MapRequest with Request{SrcBlocks: srcBlocks, DstBlocks:
// dstBlocks}. Use MapCoalesced to get the merged lists to post.
func Map(src, dst *Layout, srcBlocks, dstBlocks []int) (Transfer, error) {
	return MapRequest(src, dst, Request{SrcBlocks: srcBlocks, DstBlocks: dstBlocks})
}

// MapRequest is Map with a prefix hit (see Request). The lists are not
// coalesced: each pair covers at most one block on each side, which is what
// tests and per-block accounting want.
//
// src and dst must be a pair that Sources/Targets returns (dst's heads
// intersect src's); errors match ErrInvalid (bad layout or block ids) or
// ErrIncompatible (layouts that cannot exchange blocks) and name both sides'
// values.
func MapRequest(src, dst *Layout, req Request) (Transfer, error) {
	return Transfer{}, errNotImplemented
}

// MapCoalesced returns what Coalesce(MapRequest(src, dst, req)) returns, but
// works per run of contiguous block ids rather than per block, and allocates
// only the two result slices: it is the call for the transfer path. Stats
// counts the pairs MapRequest would give (Before) and the pairs returned
// (After).
func MapCoalesced(src, dst *Layout, req Request) (Transfer, Stats, error) {
	return Transfer{}, Stats{}, errNotImplemented
}
