// Package descriptors turns KV-cache block ids into NIXL descriptor lists. A
// [Layout] describes one engine rank's KV cache as NIXL sees it (its memory
// regions, block geometry, heads and tensor-parallel position); from it come
// the registration list and the per-block descriptor list. A [Geometry]
// states the model's KV cache once for an engine (layers, KV heads, head
// dim, dtype, block size, blocks, TP size, MLA): [Geometry.Layout] and
// [Geometry.LayoutAt] build each rank's Layout from it without region bases
// computed by hand, and [Geometry.Check] tells whether a rank's layout
// matches it. [MapCoalesced]
// (and [MapCoalescedInto], which reuses a buffer) pairs one request's source
// blocks with its destination blocks for one (source rank, destination rank)
// pair, across different TP sizes, block sizes, MLA and decode-side prefix
// hits, and merges descriptors that are contiguous on both sides, because
// NIXL charges per descriptor; [MapRequest] and [Coalesce] are the same two
// steps apart. [Sources] and [Targets] say which ranks pair up.
//
// Mapping is about source bytes and destination bytes only, whoever
// initiates: a pull connector on a decode rank calls Sources(prefill,
// decode) and, per source rank, MapCoalesced(prefill rank, decode rank, req)
// and READs with Transfer.Sides(nixl.Read) (local = destination); a push
// writer on a prefill rank calls Targets(prefill, decode) and, per target,
// MapCoalesced(prefill rank, decode rank, req) and WRITEs with
// Transfer.Sides(nixl.Write) (local = source).
//
// Models of several KV-cache groups (sliding-window layers beside full
// attention, Mamba/GDN state beside attention, as vLLM's hybrid KV-cache
// manager holds them) describe their groups in [Layout.Groups] (or
// [Geometry.Groups]); their requests come as one block list per group
// ([GroupRequest], the lists vLLM's remote_block_ids, local_block_ids and
// PUSH_REG carry, plus the request's token count) and map with
// [MapGroups] (or [MapGroupsInto]) per pair that [Sources] or [Targets]
// names, exactly like MapCoalesced. A layout without groups is one group,
// so MapGroups serves it too; the single-group functions refuse grouped
// layouts. [Layout.Order] says whether blocks are head-major (HND) or
// token-major (NHD); the mapping permutes when the two sides differ.
// docs/model-shapes.md says which model shape maps across which TP sizes
// and block sizes.
//
// A pipeline-parallel engine's rank holds one stage's layers: its Layout
// says which (PPRank, PPSize, FirstLayer, ModelLayers; all zero without
// pipeline parallelism, and then not on the wire), [Geometry.StageLayout]
// builds it, and the mapping functions pair a stage with a layout of every
// layer on the layers both hold, each into the same model layer.
// [CheckStages] tells whether an engine's stages cover the model once.
//
// The package is pure Go, does no I/O and keeps no state; every function is
// safe for concurrent use.
package descriptors
