// Package staging is the staged transfer path that both connectors share:
// instead of one NIXL descriptor per KV block fragment, the side that owns
// the source gathers a request's blocks into a contiguous, registered
// staging slot, a few large READs or WRITEs move the slot into the peer's
// slot, and the destination scatters it into its blocks before it reports
// the request done. The slot moves in chunks (ranges of regions, see
// ImageChunks) so that gather, transfer and scatter overlap.
// Fragmentation then costs two extra passes over the bytes at copy
// bandwidth instead of a fixed per-descriptor cost in NIXL (about 6 µs per
// descriptor on one H200, against a gather kernel at about 2 TB/s).
//
// The package holds only the machinery: the configuration (Config), the
// bounded pool of slots (Pool), the copy engines (Copier: HostCopier for
// DRAM, the CUDA kernel in gpucopy for VRAM), the geometry of a staged
// request (DstImage for push, SrcImage for pull; GroupDstImage and the
// group image for grouped requests), its chunks
// (ImageChunks) and the cost model (Model). The connectors decide when to stage and own the protocol.
//
// A slot is never handed out twice: Pool.Acquire gives a free slot to one
// owner, and only Release makes it free again; the connectors release a
// slot only once its transfer and its scatter (or the peer's read) have
// ended.
package staging
