package vllm

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// ErrUnsupported is matched by the errors of metadata this package cannot
// map to a descriptors.Layout: a model shape or a parallel layout that
// gonixl does not move yet. The message names the field and its value.
var ErrUnsupported = errors.New("vllm: unsupported")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// Layout names of vLLM's head-major packed KV cache: the enum name vLLM
// writes since it named layouts by dimension order, and the legacy name.
const (
	LayoutLBHNC = "LBHNC"
	LayoutHND   = "HND"
)

// LayoutOf returns the layout of rank tpRank of a vLLM engine of tpSize
// ranks, from the metadata that rank published. g is the model's geometry
// as the local engine holds it (layers, KV heads, head size, dtype, MLA):
// the compatibility hash both engines compared vouches that the peer's model
// has the same; the peer's block count, block size and TP size are its own.
// Metadata gonixl cannot move (several KV-cache groups, SSM state, DCP or PCP
// above 1, logical blocks of several physical ones, strided blocks, the NHD
// layout, mixed memory) is refused with an error matching ErrUnsupported
// that names the field and its value; metadata of another model (block
// lengths g does not give) with one matching ErrIncompatible, and regions
// that do not make a valid layout with one matching descriptors.ErrInvalid.
func LayoutOf(m *AgentMetadata, g descriptors.Geometry, tpRank, tpSize int) (descriptors.Layout, error) {
	n := len(m.KVCachesBaseAddr)
	switch {
	case m.DCPSize != 1:
		return descriptors.Layout{}, unsupported("dcp_size is %d: only 1 is supported", m.DCPSize)
	case m.PCPSize != 1:
		return descriptors.Layout{}, unsupported("pcp_size is %d: only 1 is supported", m.PCPSize)
	case m.SSMSizes != [2]uint64{}:
		return descriptors.Layout{}, unsupported("ssm_sizes is %v: SSM (Mamba) state is not supported", m.SSMSizes)
	case m.PhysicalBlocksPerLogical != 1:
		return descriptors.Layout{}, unsupported("physical_blocks_per_logical_kv_block is %d: only 1 is supported", m.PhysicalBlocksPerLogical)
	case !g.MLA && m.KVCacheLayout != LayoutLBHNC && m.KVCacheLayout != LayoutHND:
		return descriptors.Layout{}, unsupported("kv_cache_layout is %q: only the head-major %q (%q) is supported", m.KVCacheLayout, LayoutLBHNC, LayoutHND)
	}
	for i := range n {
		switch {
		case m.BlockStrides[i] != m.BlockLens[i]:
			return descriptors.Layout{}, unsupported("block_strides[%d] is %d, block_lens[%d] %d: only blocks back to back are supported", i, m.BlockStrides[i], i, m.BlockLens[i])
		case m.RegionNumBlocks != nil && m.RegionNumBlocks[i] != m.NumBlocks:
			return descriptors.Layout{}, unsupported("region_num_blocks[%d] is %d, num_blocks %d: only regions of one block count are supported", i, m.RegionNumBlocks[i], m.NumBlocks)
		case m.RegionGroupIDs != nil && m.RegionGroupIDs[i] != m.RegionGroupIDs[0]:
			return descriptors.Layout{}, unsupported("region_group_ids[%d] is %d, region_group_ids[0] %d: only one KV-cache group is supported", i, m.RegionGroupIDs[i], m.RegionGroupIDs[0])
		case m.RegionMemTypes != nil && m.RegionMemTypes[i] != m.RegionMemTypes[0]:
			return descriptors.Layout{}, unsupported("region_mem_types[%d] is %q, region_mem_types[0] %q: mixed memory is not supported", i, m.RegionMemTypes[i], m.RegionMemTypes[0])
		}
	}
	mem := nixl.VRAM
	if m.RegionMemTypes != nil && n > 0 {
		switch m.RegionMemTypes[0] {
		case MemTypeVRAM:
		case MemTypeDRAM:
			mem = nixl.DRAM
		default:
			return descriptors.Layout{}, unsupported("region_mem_types[0] is %q, want \"VRAM\" or \"DRAM\"", m.RegionMemTypes[0])
		}
	}
	peer := g
	peer.TPSize, peer.Blocks, peer.BlockSize, peer.KVPacked = tpSize, m.NumBlocks, m.BlockSize, !g.MLA
	l, err := peer.LayoutAt(mem, tpRank, uint64(m.DeviceID), m.KVCachesBaseAddr)
	if err != nil {
		return descriptors.Layout{}, fmt.Errorf("vllm: engine %q rank %d: %w", m.EngineID, tpRank, err)
	}
	for i, bl := range m.BlockLens {
		if bl != l.BlockLen() {
			return descriptors.Layout{}, fmt.Errorf("%w: engine %q rank %d: block_lens[%d] is %d, the model's geometry gives %d (%d heads x %d tokens x %d bytes)",
				ErrIncompatible, m.EngineID, tpRank, i, bl, l.BlockLen(), l.KVHeads, l.BlockSize, l.HeadBytes)
		}
	}
	return l, nil
}

// MetadataOf returns the metadata a vLLM peer expects of a rank whose KV
// cache is l (packed or MLA), published by agent agentMD of engine
// engineID; attnBackend and kvLayout name the attention backend and the
// layout as the peer's own (kvLayout "" is LayoutHND).
func MetadataOf(l descriptors.Layout, engineID string, agentMD []byte, attnBackend, kvLayout string) (*AgentMetadata, error) {
	switch {
	case len(l.Groups) > 0:
		return nil, unsupported("a layout of %d KV-cache groups: its metadata would need region_group_ids (and ssm_sizes for SSM state), which gonixl's vLLM protocol does not write yet; use gonixl's protocol", len(l.Groups))
	case l.Order == descriptors.OrderNHD:
		return nil, unsupported("kv_cache_layout %q (NHD): gonixl's vLLM protocol publishes the head-major %q only; use gonixl's protocol", "LBNHC", LayoutLBHNC)
	}
	if !l.KVPacked && !l.MLA {
		return nil, unsupported("a layout of separate K and V regions: vLLM's connector packs K and V in one region per layer (descriptors.Geometry.KVPacked)")
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	memType := MemTypeVRAM
	switch l.Mem {
	case nixl.VRAM:
	case nixl.DRAM:
		memType = MemTypeDRAM
	default:
		return nil, unsupported("memory %v: vLLM registers VRAM or DRAM", l.Mem)
	}
	if kvLayout == "" {
		kvLayout = LayoutHND
	}
	n := len(l.Regions)
	m := &AgentMetadata{
		EngineID: engineID, AgentMetadata: agentMD, DeviceID: int(l.Regions[0].DevID), NumBlocks: l.NumBlocks,
		KVCacheLayout: kvLayout, BlockSize: l.BlockSize, AttnBackendName: attnBackend, PhysicalBlocksPerLogical: 1,
		DCPSize: 1, PCPSize: 1,
		KVCachesBaseAddr: make([]uint64, n), BlockLens: make([]uint64, n), BlockStrides: make([]uint64, n),
		RegionNumBlocks: make([]int, n), RegionGroupIDs: make([]int, n), RegionMemTypes: make([]string, n),
	}
	for i, r := range l.Regions {
		m.KVCachesBaseAddr[i], m.BlockLens[i], m.BlockStrides[i] = r.Base, l.BlockLen(), l.BlockLen()
		m.RegionNumBlocks[i], m.RegionMemTypes[i] = l.NumBlocks, memType
	}
	return m, nil
}
