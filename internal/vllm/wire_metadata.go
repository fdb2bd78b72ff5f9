package vllm

import (
	"fmt"
	"unicode/utf8"
)

// AgentMetadata is vLLM's NixlAgentMetadata at every Version this package
// speaks: what one worker (one pipeline- and tensor-parallel rank) tells a
// peer about its NIXL agent and KV-cache memory. It travels msgpack-encoded
// inside a HandshakePayload. The fields are in the wire order, each with
// its key and, for a key later than version 12, the version that added it;
// Encode writes the keys of the version it is given and no other.
//
// A region is one registered KV-cache tensor base (one per layer with
// vLLM's default layout, K and V packed together); every per-region list has
// one entry per KVCachesBaseAddr entry.
//
// Decoding gives nil, not an empty slice, for an empty AgentMetadata,
// KVCachesBaseAddr, BlockLens, BlockStrides, RegionMembers, LayerGroupIDs or
// PackedMemberLayouts (an empty and a nil one encode alike), and a non-nil
// empty slice for an empty region_* list whose nil means None.
type AgentMetadata struct {
	// EngineID ("engine_id") is the sending engine's id; the receiver
	// refuses metadata whose engine id is not the one it asked.
	EngineID string
	// AgentMetadata ("agent_metadata", bin) is the NIXL agent's metadata
	// blob, as nixl's get_agent_metadata returns it.
	AgentMetadata []byte
	// KVCachesBaseAddr ("kv_caches_base_addr") is each region's base
	// address.
	KVCachesBaseAddr []uint64
	// DeviceID ("device_id") is the device index of the regions.
	DeviceID int
	// NumBlocks ("num_blocks") is the number of kernel (physical) blocks.
	NumBlocks int
	// BlockLens ("block_lens") is, per region, the bytes a block transfers.
	BlockLens []uint64
	// BlockStrides ("block_strides") is, per region, the distance in bytes
	// between consecutive blocks; never below the region's BlockLens entry.
	BlockStrides []uint64
	// KVCacheLayout ("kv_cache_layout") names the layout, e.g. "LBHNC".
	KVCacheLayout string
	// BlockSize ("block_size") is the tokens per kernel block.
	BlockSize int
	// SSMSizes ("ssm_sizes", an array of 2) is (conv bytes, ssm bytes) for
	// Mamba layers, (0, 0) otherwise.
	SSMSizes [2]uint64
	// AttnBackendName ("attn_backend_name") names the attention backend,
	// e.g. "FLASH_ATTN".
	AttnBackendName string
	// PhysicalBlocksPerLogical ("physical_blocks_per_logical_kv_block") is
	// the kernel blocks per logical block, 1 normally.
	PhysicalBlocksPerLogical int
	// RegionNumBlocks ("region_num_blocks", nil = None) is each region's
	// block count; None means NumBlocks for every region.
	RegionNumBlocks []int
	// RegionGroupIDs ("region_group_ids", nil = None) is each region's
	// KV-cache group, SharedRegionGroupID for a region several share.
	RegionGroupIDs []int
	// RegionNames ("region_names", nil = None) is, per region, the first
	// layer that registered it. vLLM requires a non-None list to equal its
	// own, so send nil unless the names are vLLM's.
	RegionNames []string
	// RegionMemTypes ("region_mem_types", nil = None) is MemTypeVRAM or
	// MemTypeDRAM per region; None means the receiver's own type.
	RegionMemTypes []string
	// DCPSize ("dcp_size", default 1) and PCPSize ("pcp_size", default 1)
	// are the decode- and prefill-context-parallel sizes.
	DCPSize int
	PCPSize int
	// PLEBlockLen ("ple_block_len", from 14, nil = None) is the page length
	// of a PLE short-conv state; None when the model has none.
	PLEBlockLen *uint64
	// RegionMembers ("region_members", default empty) is, per region, the
	// vLLM names of the layers sharing it. Empty, or one entry per region.
	// At 12 only vLLM's push worker fills it (for PP); from 13 every worker
	// does; from 16 a peer that leaves it empty is refused, as regions pair
	// by these names (PairByLayer).
	RegionMembers [][]string
	// LayerGroupIDs ("layer_group_ids", from 16, default empty) is the
	// KV-cache group of each layer of RegionMembers: a dict, which msgspec
	// writes in insertion order, so a list of pairs here.
	LayerGroupIDs []LayerGroup
	// PackedMemberLayouts ("packed_member_layouts", from 13, default
	// empty) is, for a layer whose page sits inside a block row packing
	// several layers' pages, its offset in the row's block and its page
	// length: a dict of (int, int) tuples, in insertion order.
	PackedMemberLayouts []PackedMember
}

// LayerGroup is one entry of layer_group_ids.
type LayerGroup struct {
	Layer string
	Group int // in [0, MaxInt]
}

// PackedMember is one entry of packed_member_layouts.
type PackedMember struct {
	Layer   string
	Offset  uint64 // bytes from the start of the row's block
	PageLen uint64 // bytes of the layer's page
}

// The keys of NixlAgentMetadata, in declaration (wire) order.
const (
	kEngineID = iota
	kAgentMetadata
	kKVCachesBaseAddr
	kDeviceID
	kNumBlocks
	kBlockLens
	kBlockStrides
	kKVCacheLayout
	kBlockSize
	kSSMSizes
	kAttnBackendName
	kPhysicalBlocksPerLogical
	kRegionNumBlocks // the first key with a default; all later ones have one
	kRegionGroupIDs
	kRegionNames
	kRegionMemTypes
	kDCPSize
	kPCPSize
	kPLEBlockLen
	kRegionMembers
	kLayerGroupIDs
	kPackedMemberLayouts
	numMetadataKeys
)

var metadataKeys = [numMetadataKeys]string{
	"engine_id", "agent_metadata", "kv_caches_base_addr", "device_id",
	"num_blocks", "block_lens", "block_strides", "kv_cache_layout",
	"block_size", "ssm_sizes", "attn_backend_name",
	"physical_blocks_per_logical_kv_block", "region_num_blocks",
	"region_group_ids", "region_names", "region_mem_types", "dcp_size",
	"pcp_size", "ple_block_len", "region_members", "layer_group_ids",
	"packed_member_layouts",
}

// keySince is the version that added each key: 12 for the keys of the
// oldest version spoken, later for the ones added since (nixl/metadata.py
// @ vllm 0.31.0, 0.32.0, 0.34.0).
var keySince = [numMetadataKeys]Version{
	kPLEBlockLen:         V14,
	kLayerGroupIDs:       V16,
	kPackedMemberLayouts: V13,
	// every other key: the zero Version, below V12
}

// numKeys returns how many keys NixlAgentMetadata has at v.
func numKeys(v Version) int {
	n := 0
	for k := range numMetadataKeys {
		if v.hasKey(k) {
			n++
		}
	}
	return n
}

const metadataMsg = "agent metadata"

// Regions returns the number of regions, len(KVCachesBaseAddr).
func (m *AgentMetadata) Regions() int { return len(m.KVCachesBaseAddr) }

// Encode returns m as msgspec encodes version v's NixlAgentMetadata: a
// map16 of all its keys in declaration order (19 at 12, 20 at 13, 21 at 14
// and 15, 22 at 16), None as nil, dicts in their list's order, every
// integer in its smallest form. Fields that v does not have are left out,
// whatever they hold. It does not validate m; see Validate.
func (m *AgentMetadata) Encode(v Version) []byte { return m.Append(nil, v) }

// Append appends Encode's bytes to dst.
func (m *AgentMetadata) Append(dst []byte, v Version) []byte {
	b := dst
	if b == nil {
		b = make([]byte, 0, 400+len(m.AgentMetadata)+40*len(m.KVCachesBaseAddr))
	}
	key := func(k int) { b = appendStr(b, metadataKeys[k]) }
	uints := func(k int, vs []uint64) {
		key(k)
		b = appendArrayLen(b, len(vs))
		for _, v := range vs {
			b = appendUint(b, v)
		}
	}
	ints := func(k int, vs []int) {
		key(k)
		if vs == nil {
			b = appendNil(b)
			return
		}
		b = appendArrayLen(b, len(vs))
		for _, v := range vs {
			b = appendInt(b, int64(v))
		}
	}
	strs := func(vs []string) {
		if vs == nil {
			b = appendNil(b)
			return
		}
		b = appendArrayLen(b, len(vs))
		for _, v := range vs {
			b = appendStr(b, v)
		}
	}
	integer := func(k, v int) {
		key(k)
		b = appendInt(b, int64(v))
	}
	str := func(k int, v string) {
		key(k)
		b = appendStr(b, v)
	}

	b = appendMapLen(b, numKeys(v))
	str(kEngineID, m.EngineID)
	key(kAgentMetadata)
	b = appendBin(b, m.AgentMetadata)
	uints(kKVCachesBaseAddr, m.KVCachesBaseAddr)
	integer(kDeviceID, m.DeviceID)
	integer(kNumBlocks, m.NumBlocks)
	uints(kBlockLens, m.BlockLens)
	uints(kBlockStrides, m.BlockStrides)
	str(kKVCacheLayout, m.KVCacheLayout)
	integer(kBlockSize, m.BlockSize)
	uints(kSSMSizes, m.SSMSizes[:])
	str(kAttnBackendName, m.AttnBackendName)
	integer(kPhysicalBlocksPerLogical, m.PhysicalBlocksPerLogical)
	ints(kRegionNumBlocks, m.RegionNumBlocks)
	ints(kRegionGroupIDs, m.RegionGroupIDs)
	key(kRegionNames)
	strs(m.RegionNames)
	key(kRegionMemTypes)
	strs(m.RegionMemTypes)
	integer(kDCPSize, m.DCPSize)
	integer(kPCPSize, m.PCPSize)
	if v.hasKey(kPLEBlockLen) {
		key(kPLEBlockLen)
		if m.PLEBlockLen == nil {
			b = appendNil(b)
		} else {
			b = appendUint(b, *m.PLEBlockLen)
		}
	}
	key(kRegionMembers)
	b = appendArrayLen(b, len(m.RegionMembers))
	for _, names := range m.RegionMembers {
		b = appendArrayLen(b, len(names)) // a list, never None
		for _, name := range names {
			b = appendStr(b, name)
		}
	}
	if v.hasKey(kLayerGroupIDs) {
		key(kLayerGroupIDs)
		b = appendMapLen(b, len(m.LayerGroupIDs))
		for _, e := range m.LayerGroupIDs {
			b = appendInt(appendStr(b, e.Layer), int64(e.Group))
		}
	}
	if v.hasKey(kPackedMemberLayouts) {
		key(kPackedMemberLayouts)
		b = appendMapLen(b, len(m.PackedMemberLayouts))
		for _, e := range m.PackedMemberLayouts {
			b = appendArrayLen(appendStr(b, e.Layer), 2)
			b = appendUint(appendUint(b, e.Offset), e.PageLen)
		}
	}
	return b
}

// DecodeAgentMetadata decodes version v's NixlAgentMetadata as msgspec's
// typed decoder does: a map whose keys may come in any order, unknown keys
// (and keys of later versions) skipped, a missing key with a default given
// it (region_* and ple_block_len None, dcp_size and pcp_size 1,
// region_members, layer_group_ids and packed_member_layouts empty), a
// missing key without one an error naming it, and every value of its
// declared type exactly (no integer for a string, no float or bool for an
// integer, bin for agent_metadata, a 2-array for a tuple). Beyond msgspec
// it refuses a repeated key (a repeated dict key too), and a value that
// Validate refuses. Every error wraps ErrMalformed and names the key; a
// version not spoken is an error matching ErrUnsupported.
func DecodeAgentMetadata(b []byte, v Version) (*AgentMetadata, error) {
	if err := v.Check(); err != nil {
		return nil, err
	}
	if len(b) > MaxEncodedAgentMetadata {
		return nil, fmt.Errorf("%w: %s of %d bytes, limit %d", ErrMalformed, metadataMsg, len(b), MaxEncodedAgentMetadata)
	}
	rd := newReader(b)
	n, err := rd.MapLen(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", metadataMsg, err)
	}
	m := &AgentMetadata{DCPSize: 1, PCPSize: 1}
	var seen [numMetadataKeys]bool
	for range n {
		k, err := rd.RawStr(MaxStringLen)
		if err != nil {
			return nil, fmt.Errorf("%s: map key: %w", metadataMsg, err)
		}
		i := keyIndex(metadataKeys[:], k)
		if i >= 0 && !v.hasKey(i) {
			i = -1 // a later version's key is unknown at v
		}
		if i < 0 {
			if err := rd.Skip(); err != nil {
				return nil, fmt.Errorf("%s: unknown key %q: %w", metadataMsg, k, err)
			}
			continue
		}
		if seen[i] {
			return nil, fmt.Errorf("%w: %s field %s appears twice", ErrMalformed, metadataMsg, metadataKeys[i])
		}
		seen[i] = true
		if err := m.decodeField(rd, i); err != nil {
			return nil, fieldErr(metadataMsg, metadataKeys[i], err)
		}
	}
	if err := rd.end(metadataMsg); err != nil {
		return nil, err
	}
	for i := range kRegionNumBlocks {
		if !seen[i] {
			return nil, fmt.Errorf("%w: %s field %s is missing", ErrMalformed, metadataMsg, metadataKeys[i])
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// keyIndex returns the index of k in keys, or -1.
func keyIndex(keys []string, k []byte) int {
	for i, name := range keys {
		if string(k) == name {
			return i
		}
	}
	return -1
}

func (m *AgentMetadata) decodeField(rd *mpReader, i int) error {
	var err error
	switch i {
	case kEngineID:
		m.EngineID, err = rd.str()
	case kAgentMetadata:
		m.AgentMetadata, err = rd.Bin(MaxAgentMetadata)
	case kKVCachesBaseAddr:
		m.KVCachesBaseAddr, err = decodeUints(rd)
	case kDeviceID:
		m.DeviceID, err = rd.int(0)
	case kNumBlocks:
		m.NumBlocks, err = rd.int(0)
	case kBlockLens:
		m.BlockLens, err = decodeUints(rd)
	case kBlockStrides:
		m.BlockStrides, err = decodeUints(rd)
	case kKVCacheLayout:
		m.KVCacheLayout, err = rd.str()
	case kBlockSize:
		m.BlockSize, err = rd.int(1)
	case kSSMSizes:
		m.SSMSizes, err = decodePair(rd)
	case kAttnBackendName:
		m.AttnBackendName, err = rd.str()
	case kPhysicalBlocksPerLogical:
		m.PhysicalBlocksPerLogical, err = rd.int(1)
	case kRegionNumBlocks:
		if !rd.IsNil() {
			m.RegionNumBlocks, err = decodeInts(rd, 0)
		}
	case kRegionGroupIDs:
		if !rd.IsNil() {
			m.RegionGroupIDs, err = decodeInts(rd, SharedRegionGroupID)
		}
	case kRegionNames:
		if !rd.IsNil() {
			m.RegionNames, err = decodeStrs(rd, MaxRegions)
		}
	case kRegionMemTypes:
		if !rd.IsNil() {
			m.RegionMemTypes, err = decodeStrs(rd, MaxRegions)
		}
	case kDCPSize:
		m.DCPSize, err = rd.int(1)
	case kPCPSize:
		m.PCPSize, err = rd.int(1)
	case kPLEBlockLen:
		if !rd.IsNil() {
			var n uint64
			n, err = rd.Uint()
			m.PLEBlockLen = &n
		}
	case kRegionMembers:
		m.RegionMembers, err = decodeMembers(rd)
	case kLayerGroupIDs:
		m.LayerGroupIDs, err = decodeLayerGroups(rd)
	case kPackedMemberLayouts:
		m.PackedMemberLayouts, err = decodePackedMembers(rd)
	}
	return err
}

// decodeUints reads a per-region list of unsigned integers (nil when empty).
func decodeUints(rd *mpReader) ([]uint64, error) {
	n, err := rd.ArrayLen(MaxRegions)
	if err != nil || n == 0 {
		return nil, err
	}
	vs := make([]uint64, n)
	for i := range vs {
		if vs[i], err = rd.Uint(); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return vs, nil
}

// decodeInts reads a per-region list of integers in [min, MaxInt]; empty
// is a non-nil empty slice, as nil stands for None.
func decodeInts(rd *mpReader, min int) ([]int, error) {
	n, err := rd.ArrayLen(MaxRegions)
	if err != nil {
		return nil, err
	}
	vs := make([]int, n)
	for i := range vs {
		if vs[i], err = rd.int(min); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return vs, nil
}

// decodeStrs reads a list of at most max strings; empty is a non-nil empty
// slice.
func decodeStrs(rd *mpReader, max int) ([]string, error) {
	n, err := rd.ArrayLen(max)
	if err != nil {
		return nil, err
	}
	vs := make([]string, n)
	for i := range vs {
		if vs[i], err = rd.str(); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return vs, nil
}

func decodePair(rd *mpReader) (p [2]uint64, err error) {
	start := rd.Off()
	n, err := rd.ArrayLen(-1)
	if err != nil {
		return p, err
	}
	if n != 2 {
		return p, rd.ErrorAt(start, "array of %d entries, want 2", n)
	}
	for i := range p {
		if p[i], err = rd.Uint(); err != nil {
			return p, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return p, nil
}

func decodeMembers(rd *mpReader) ([][]string, error) {
	n, err := rd.ArrayLen(MaxRegions)
	if err != nil || n == 0 {
		return nil, err
	}
	vs := make([][]string, n)
	for i := range vs {
		if vs[i], err = decodeStrs(rd, MaxRegionMembers); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return vs, nil
}

func metadataErr(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s field %s %s", ErrMalformed, metadataMsg, key, fmt.Sprintf(format, args...))
}

// Validate reports the first field of m that DecodeAgentMetadata would
// refuse: more than MaxRegions regions; a per-region list (block_lens,
// block_strides, and region_num_blocks, region_group_ids, region_names,
// region_mem_types and region_members when given) whose length is not the
// number of regions; a block stride below its block length; an integer
// outside its range (device_id, num_blocks and region_num_blocks entries
// non-negative, region_group_ids entries from SharedRegionGroupID, sizes
// from 1, all at most MaxInt); a string longer than MaxStringLen or not
// UTF-8; agent_metadata longer than MaxAgentMetadata; a layer_group_ids or
// packed_member_layouts entry that validateDicts refuses. The error wraps
// ErrMalformed and names the field.
func (m *AgentMetadata) Validate() error {
	regions := len(m.KVCachesBaseAddr)
	if regions > MaxRegions {
		return metadataErr(metadataKeys[kKVCachesBaseAddr], "lists %d regions, limit %d", regions, MaxRegions)
	}
	if len(m.AgentMetadata) > MaxAgentMetadata {
		return metadataErr(metadataKeys[kAgentMetadata], "is %d bytes, limit %d", len(m.AgentMetadata), MaxAgentMetadata)
	}
	for _, f := range []struct {
		key string
		n   int
		set bool
	}{
		{metadataKeys[kBlockLens], len(m.BlockLens), true},
		{metadataKeys[kBlockStrides], len(m.BlockStrides), true},
		{metadataKeys[kRegionNumBlocks], len(m.RegionNumBlocks), m.RegionNumBlocks != nil},
		{metadataKeys[kRegionGroupIDs], len(m.RegionGroupIDs), m.RegionGroupIDs != nil},
		{metadataKeys[kRegionNames], len(m.RegionNames), m.RegionNames != nil},
		{metadataKeys[kRegionMemTypes], len(m.RegionMemTypes), m.RegionMemTypes != nil},
		{metadataKeys[kRegionMembers], len(m.RegionMembers), len(m.RegionMembers) > 0},
	} {
		if f.set && f.n != regions {
			return metadataErr(f.key, "has %d entries, kv_caches_base_addr has %d", f.n, regions)
		}
	}
	for i := range regions {
		if m.BlockStrides[i] < m.BlockLens[i] {
			return metadataErr(metadataKeys[kBlockStrides], "entry %d is %d, below block_lens entry %d", i, m.BlockStrides[i], m.BlockLens[i])
		}
	}
	for _, f := range []struct {
		key string
		v   int
		min int
	}{
		{metadataKeys[kDeviceID], m.DeviceID, 0},
		{metadataKeys[kNumBlocks], m.NumBlocks, 0},
		{metadataKeys[kBlockSize], m.BlockSize, 1},
		{metadataKeys[kPhysicalBlocksPerLogical], m.PhysicalBlocksPerLogical, 1},
		{metadataKeys[kDCPSize], m.DCPSize, 1},
		{metadataKeys[kPCPSize], m.PCPSize, 1},
	} {
		if f.v < f.min || f.v > MaxInt {
			return metadataErr(f.key, "is %d, outside [%d, %d]", f.v, f.min, MaxInt)
		}
	}
	for i, v := range m.RegionNumBlocks {
		if v < 0 || v > MaxInt {
			return metadataErr(metadataKeys[kRegionNumBlocks], "entry %d is %d, outside [0, %d]", i, v, MaxInt)
		}
	}
	for i, v := range m.RegionGroupIDs {
		if v < SharedRegionGroupID || v > MaxInt {
			return metadataErr(metadataKeys[kRegionGroupIDs], "entry %d is %d, outside [%d, %d]", i, v, SharedRegionGroupID, MaxInt)
		}
	}
	for _, f := range []struct {
		key string
		v   string
	}{
		{metadataKeys[kEngineID], m.EngineID},
		{metadataKeys[kKVCacheLayout], m.KVCacheLayout},
		{metadataKeys[kAttnBackendName], m.AttnBackendName},
	} {
		if err := checkString(f.v); err != "" {
			return metadataErr(f.key, "%s", err)
		}
	}
	for _, f := range []struct {
		key string
		vs  []string
	}{
		{metadataKeys[kRegionNames], m.RegionNames},
		{metadataKeys[kRegionMemTypes], m.RegionMemTypes},
	} {
		for i, v := range f.vs {
			if err := checkString(v); err != "" {
				return metadataErr(f.key, "entry %d %s", i, err)
			}
		}
	}
	for i, names := range m.RegionMembers {
		if len(names) > MaxRegionMembers {
			return metadataErr(metadataKeys[kRegionMembers], "entry %d lists %d layers, limit %d", i, len(names), MaxRegionMembers)
		}
		for j, v := range names {
			if err := checkString(v); err != "" {
				return metadataErr(metadataKeys[kRegionMembers], "entry %d name %d %s", i, j, err)
			}
		}
	}
	return m.validateDicts()
}

// checkString says what is wrong with a string field, or "".
func checkString(s string) string {
	switch {
	case len(s) > MaxStringLen:
		return fmt.Sprintf("is %d bytes, limit %d", len(s), MaxStringLen)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}
