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

func incompatible(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrIncompatible, fmt.Sprintf(format, args...))
}

// Layout names of vLLM's packed KV cache: the enum names vLLM writes since
// it named layouts by dimension order (LBHNC head-major, LBNHC token-major),
// and the legacy names of the same layouts.
const (
	LayoutLBHNC = "LBHNC"
	LayoutHND   = "HND"
	LayoutLBNHC = "LBNHC"
	LayoutNHD   = "NHD"
)

// orderOf returns the descriptors.Layout.Order a kv_cache_layout names. MLA
// caches have no head dimension to order, and vLLM does not compare their
// layout names either.
func orderOf(name string, mla bool) (string, error) {
	switch {
	case mla:
		return "", nil
	case name == LayoutLBHNC || name == LayoutHND:
		return "", nil
	case name == LayoutLBNHC || name == LayoutNHD:
		return descriptors.OrderNHD, nil
	}
	return "", unsupported("kv_cache_layout is %q: only the packed %q (%q, head-major) and %q (%q, token-major) are supported", name, LayoutLBHNC, LayoutHND, LayoutLBNHC, LayoutNHD)
}

// LayoutOf returns the layout of rank tpRank of a vLLM engine of tpSize
// ranks, from the metadata that rank published. g is the model's geometry
// as the local engine holds it (layers, KV heads, head size, dtype, MLA,
// and its KV-cache groups with their kinds, windows and SSM state): the
// compatibility hash both engines compared vouches that the peer's model
// has the same; the peer's block count, block size and TP size are its own.
// With groups, which the metadata names only by index (region_group_ids),
// the groups' kinds, windows and the split of the conv state into its
// sub-projections (which vLLM derives from the model) come from g, and
// every size the metadata does carry (block_lens, ssm_sizes, the regions
// of each group) must agree with g (groupLayoutOf).
//
// Metadata gonixl cannot move (DCP or PCP above 1, strided blocks, mixed
// memory, a layout name other than LBHNC/HND and LBNHC/NHD, logical blocks
// of several physical ones without groups) is refused with an error
// matching ErrUnsupported that names the field and its value; metadata of
// another model (sizes g does not give) with one matching ErrIncompatible,
// and regions that do not make a valid layout with one matching
// descriptors.ErrInvalid.
func LayoutOf(m *AgentMetadata, g descriptors.Geometry, tpRank, tpSize int) (descriptors.Layout, error) {
	n := len(m.KVCachesBaseAddr)
	switch {
	case len(m.PackedMemberLayouts) > 0:
		return descriptors.Layout{}, unsupported("packed_member_layouts places %d layers (%q first) inside packed block rows: gonixl moves one region per layer", len(m.PackedMemberLayouts), m.PackedMemberLayouts[0].Layer)
	case m.PLEBlockLen != nil:
		return descriptors.Layout{}, unsupported("ple_block_len is %d: PLE short-conv state is not supported", *m.PLEBlockLen)
	case m.DCPSize != 1:
		return descriptors.Layout{}, unsupported("dcp_size is %d: only 1 is supported", m.DCPSize)
	case m.PCPSize != 1:
		return descriptors.Layout{}, unsupported("pcp_size is %d: only 1 is supported", m.PCPSize)
	}
	order, err := orderOf(m.KVCacheLayout, g.MLA)
	if err != nil {
		return descriptors.Layout{}, err
	}
	for i := range n {
		switch {
		case m.BlockStrides[i] != m.BlockLens[i]:
			return descriptors.Layout{}, unsupported("block_strides[%d] is %d, block_lens[%d] %d: only blocks back to back are supported", i, m.BlockStrides[i], i, m.BlockLens[i])
		case m.RegionNumBlocks != nil && m.RegionNumBlocks[i] != m.NumBlocks:
			return descriptors.Layout{}, unsupported("region_num_blocks[%d] is %d, num_blocks %d: only regions of one block count are supported", i, m.RegionNumBlocks[i], m.NumBlocks)
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
	if g.Groups != nil && len(*g.Groups) > 0 {
		l, err := groupLayoutOf(m, g, tpRank, tpSize, mem, order)
		if err != nil {
			return descriptors.Layout{}, fmt.Errorf("vllm: engine %q rank %d: %w", m.EngineID, tpRank, err)
		}
		return l, nil
	}
	switch {
	case m.SSMSizes != [2]uint64{}:
		return descriptors.Layout{}, incompatible("engine %q rank %d: ssm_sizes is %v: the peer holds SSM (Mamba) state, the local model's geometry has no KV-cache groups (descriptors.Geometry.Groups)", m.EngineID, tpRank, m.SSMSizes)
	case m.PhysicalBlocksPerLogical != 1:
		return descriptors.Layout{}, unsupported("physical_blocks_per_logical_kv_block is %d: only 1 is supported for a model of one KV-cache group", m.PhysicalBlocksPerLogical)
	}
	for i := range n {
		if m.RegionGroupIDs != nil && m.RegionGroupIDs[i] != m.RegionGroupIDs[0] {
			return descriptors.Layout{}, incompatible("engine %q rank %d: region_group_ids[%d] is %d, region_group_ids[0] %d: the peer has several KV-cache groups, the local model's geometry one (descriptors.Geometry.Groups)", m.EngineID, tpRank, i, m.RegionGroupIDs[i], m.RegionGroupIDs[0])
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
	l.Order = order
	return l, nil
}

// MetadataOf returns the metadata a vLLM peer expects of a rank whose KV
// cache is l (packed or MLA, one KV-cache group or several), published by
// agent agentMD of engine engineID; attnBackend and kvLayout name the
// attention backend and the layout as the peer's own (kvLayout "" is
// LayoutLBHNC, the name vLLM publishes: its worker sends
// get_resolved_kv_cache_layout().name, and a vLLM peer compares the two
// names exactly). kvLayout names the head-major layout; a token-major (NHD)
// layout is published as LayoutLBNHC, or LayoutNHD when kvLayout is the
// legacy LayoutHND or LayoutNHD (what vLLM releases before the
// KVCacheLayout enum published). A grouped layout also gets vLLM's
// per-region fields (groupMetadata).
func MetadataOf(l descriptors.Layout, engineID string, agentMD []byte, attnBackend, kvLayout string) (*AgentMetadata, error) {
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
	name, err := layoutName(&l, kvLayout)
	if err != nil {
		return nil, err
	}
	n := len(l.Regions)
	m := &AgentMetadata{
		EngineID: engineID, AgentMetadata: agentMD, DeviceID: int(l.Regions[0].DevID), NumBlocks: l.NumBlocks,
		KVCacheLayout: name, BlockSize: l.BlockSize, AttnBackendName: attnBackend, PhysicalBlocksPerLogical: 1,
		DCPSize: 1, PCPSize: 1,
		KVCachesBaseAddr: make([]uint64, n), BlockLens: make([]uint64, n), BlockStrides: make([]uint64, n),
		RegionNumBlocks: make([]int, n), RegionGroupIDs: make([]int, n), RegionMemTypes: make([]string, n),
	}
	for i, r := range l.Regions {
		bl := l.BlockLenOf(i)
		m.KVCachesBaseAddr[i], m.BlockLens[i], m.BlockStrides[i] = r.Base, bl, bl
		m.RegionNumBlocks[i], m.RegionMemTypes[i] = l.NumBlocks, memType
	}
	if len(l.Groups) > 0 {
		if err := groupMetadata(&l, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// layoutName returns the kv_cache_layout of l, kvLayout being the name the
// peers give the head-major layout.
func layoutName(l *descriptors.Layout, kvLayout string) (string, error) {
	if kvLayout == "" {
		kvLayout = LayoutLBHNC
	}
	nhd := l.Order == descriptors.OrderNHD
	switch {
	case l.MLA || (!nhd && (kvLayout == LayoutHND || kvLayout == LayoutLBHNC)):
		return kvLayout, nil
	case nhd && (kvLayout == LayoutHND || kvLayout == LayoutNHD):
		return LayoutNHD, nil
	case nhd && (kvLayout == LayoutLBHNC || kvLayout == LayoutLBNHC):
		return LayoutLBNHC, nil
	case !nhd && (kvLayout == LayoutLBNHC || kvLayout == LayoutNHD):
		return "", unsupported("kv_cache_layout %q names token-major (NHD) blocks, and the rank's layout is head-major (descriptors.Layout.Order %q)", kvLayout, l.Order)
	}
	return "", unsupported("kv_cache_layout %q: gonixl publishes %q, %q, %q or %q", kvLayout, LayoutLBHNC, LayoutHND, LayoutLBNHC, LayoutNHD)
}
