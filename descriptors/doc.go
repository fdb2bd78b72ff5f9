// Package descriptors turns KV-cache block ids into NIXL descriptor lists. A
// [Layout] describes one engine rank's KV cache as NIXL sees it (its memory
// regions, block geometry, heads and tensor-parallel position); from it come
// the registration list and the per-block descriptor list. [Map] and
// [MapCoalesced] pair one request's source blocks with its destination blocks
// for one (source rank, destination rank) pair, across different TP sizes,
// block sizes, MLA and decode-side prefix hits, and [Coalesce] merges
// descriptors that are contiguous on both sides, because NIXL charges per
// descriptor. [Sources] and [Targets] say which ranks pair up. Mapping is about
// source bytes and destination bytes only: a pull connector READs with the
// destination as its local side, a push connector WRITEs with the source as its
// local side, and both use the same functions. The package is pure Go, does
// no I/O and keeps no state.
package descriptors
