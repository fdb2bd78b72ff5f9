package descriptors

import "github.com/gonixl/gonixl/nixl"

// Transfer is the descriptor lists of one (source rank, destination rank)
// pair for one request: Src.Descs[i] is copied to Dst.Descs[i], and both have
// the same length. Bytes is the total moved.
type Transfer struct {
	Src   nixl.XferList
	Dst   nixl.XferList
	Bytes uint64

	// regionPairs is the number of pairs per region in a Transfer built by
	// MapRequest (every region has as many), so that Coalesce keeps regions
	// apart; 0 when unknown, -1 once coalesced.
	regionPairs int
	// bounds, set by MapGroupsRequest, are the indexes where each region's
	// pairs of each group start (regions and groups have different counts
	// there); Coalesce never merges a pair into the one before a bound.
	bounds []int
}

// Len returns the number of descriptor pairs.
func (t Transfer) Len() int { return len(t.Src.Descs) }

// Sides returns the lists in the order an initiator passes them to
// nixl.Agent.CreateXferReq (local, remote): for nixl.Read (pull: the
// destination reads) local is Dst and remote is Src; for nixl.Write (push: the
// source writes) local is Src and remote is Dst.
func (t Transfer) Sides(op nixl.XferOp) (local, remote nixl.XferList) {
	if op == nixl.Read {
		return t.Dst, t.Src
	}
	return t.Src, t.Dst
}

// Stats counts descriptor pairs before and after coalescing.
type Stats struct {
	Before int
	After  int
}

// Request names one request's blocks on both sides of a pair.
//
// SrcBlocks are the source's block ids for the whole request, in token order,
// from token 0. DstBlocks are the destination block ids that must receive
// data, in token order. When the destination already holds the first
// DstCached blocks of the request (a prefix-cache hit), they are left out of
// DstBlocks, which then starts with the block right after them, the way
// vLLM hands a connector only the blocks without cached content; only the
// tokens from DstCached*dst.BlockSize on move. The prefix is counted in
// destination blocks and given explicitly because, with source blocks larger
// than destination blocks, list lengths alone cannot tell a prefix hit from a
// partly used last block.
//
// The lists must describe the same tokens: after the skipped prefix, each
// list must reach the end of the request with only its last block partly
// used. With equal block sizes that means len(SrcBlocks) ==
// DstCached+len(DstBlocks). Blocks move whole (in units of the smaller block
// size), so the unused tail of the last block moves too; it is padding the
// destination owns. An empty DstBlocks (everything cached) moves nothing.
// Destination ids must be distinct; a source id may repeat.
type Request struct {
	SrcBlocks []int
	DstBlocks []int
	DstCached int
}
