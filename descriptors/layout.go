package descriptors

import (
	"github.com/gonixl/gonixl/nixl"
)

// Region is one contiguous KV-cache tensor as registered with NIXL: the
// NumBlocks blocks of one layer's K (or V, or MLA latent) cache, back to back.
type Region struct {
	// Base is the address of block 0 (for FILE memory, the file offset).
	Base uint64 `msgpack:"base"`
	// DevID is the device id NIXL needs with the address (GPU index for
	// VRAM, 0 for DRAM, the file descriptor for FILE).
	DevID uint64 `msgpack:"dev_id"`
}

// Layout describes one engine rank's KV cache as NIXL sees it. It is sent in
// the handshake (msgpack), so both sides know each other's geometry.
//
// Regions are layer-major: layer 0 K, layer 0 V, layer 1 K, ... (2*NumLayers
// regions), or one region per layer when MLA is set (NumLayers regions). Each
// region holds NumBlocks blocks of BlockLen bytes back to back, block b at
// Base + b*BlockLen.
//
// Inside a block the memory order is HND: head-major, then token, then the
// HeadBytes bytes of one token of one head. So the bytes of head h (counted
// from this rank's first head) and token t of a block start at
// h*BlockSize*HeadBytes + t*HeadBytes. This is the order vLLM requires for
// heterogeneous TP, because a rank's share of heads is then one contiguous run
// of every block.
//
// Heads: the model has ModelKVHeads KV heads (0 means KVHeads*TPSize). When
// TPSize <= ModelKVHeads, rank r holds heads [r*KVHeads, (r+1)*KVHeads). When
// TPSize > ModelKVHeads (vLLM replicates KV heads), each rank holds KVHeads=1
// head, head r/(TPSize/ModelKVHeads). With MLA the latent cache is the same on
// every rank: KVHeads is the latent "head" count (usually 1) and every rank
// holds all of it.
//
// KVPacked is vLLM's own layout since its connector version 12: one region
// per layer holding K and V together, packed in each head's token (its
// head_dim elements of K, then those of V), so HeadBytes counts both. The
// memory order is still head-major, so a rank's heads stay one run of every
// block; a packed layout exchanges blocks only with a packed one.
//
// Order NHD (vLLM's LBNHC) puts a block token-major instead: token t, head h
// at (t*KVHeads + h)*HeadBytes. Two NHD layouts of equal TP still exchange
// whole blocks; across TP sizes, or between an NHD and an HND side, the
// mapping cuts per token (and per head where the orders differ), see
// [MapRequest].
//
// Groups, when set, makes the layout several KV-cache groups (sliding
// window beside full attention, Mamba state beside attention; see [Group]):
// the groups then say which regions are which layers and how their blocks
// are laid out, and requests map with [MapGroups]. A layout without groups
// is the one group [Layout.GroupList] returns, exactly as before groups
// existed.
type Layout struct {
	// Mem is the memory type of every region.
	Mem nixl.MemType `msgpack:"mem"`
	// Regions are the KV tensors, layer-major (see the type's doc).
	Regions []Region `msgpack:"regions"`
	// NumLayers is the number of attention layers.
	NumLayers int `msgpack:"num_layers"`
	// NumBlocks is the number of blocks in every region.
	NumBlocks int `msgpack:"num_blocks"`
	// BlockSize is the block size in tokens.
	BlockSize int `msgpack:"block_size"`
	// KVHeads is the number of KV heads this rank holds (MLA: latent heads).
	KVHeads int `msgpack:"kv_heads"`
	// ModelKVHeads is the model's number of KV heads; 0 means KVHeads*TPSize.
	// Set it only when TPSize exceeds it (replicated heads). Ignored for MLA.
	ModelKVHeads int `msgpack:"model_kv_heads,omitempty"`
	// HeadBytes is the size of one token of one head: head_dim x dtype size.
	HeadBytes int `msgpack:"head_bytes"`
	// DType names the element type ("bfloat16", "float8_e4m3fn", ...); both
	// sides must agree.
	DType string `msgpack:"dtype"`
	// MLA is set for multi-head latent attention (one region per layer, KV
	// replicated on every TP rank).
	MLA bool `msgpack:"mla"`
	// KVPacked is set when each layer's K and V are one region, packed per
	// head and token (see the type's doc); never with MLA.
	KVPacked bool `msgpack:"kv_packed,omitempty"`
	// TPRank is this rank's tensor-parallel rank, in [0, TPSize).
	TPRank int `msgpack:"tp_rank"`
	// TPSize is the engine's tensor-parallel size.
	TPSize int `msgpack:"tp_size"`
	// Order is the memory order inside an attention block: "" or OrderHND
	// (head-major), or OrderNHD (token-major). Omitted on the wire when
	// empty, so a layout that does not set it encodes as before.
	Order string `msgpack:"order,omitempty"`
	// Groups are the KV-cache groups; nil for one group of full attention
	// (MLA with MLA set) over every region. With Groups, MLA must be false
	// (an MLA group says it) and every region must belong to a group.
	// Omitted on the wire when nil.
	Groups []Group `msgpack:"groups,omitempty"`
	// PPRank and PPSize are the rank's pipeline-parallel stage and the
	// engine's number of stages (0 means 1: no pipeline parallelism).
	// A stage holds the model's layers [FirstLayer, FirstLayer+NumLayers)
	// of ModelLayers (0 means NumLayers), and Regions are those layers'
	// only, in the same order as a whole layout's. All four are omitted
	// on the wire when zero, so a layout without pipeline parallelism
	// encodes as before they existed. Not with Groups.
	PPRank      int `msgpack:"pp_rank,omitempty"`
	PPSize      int `msgpack:"pp_size,omitempty"`
	FirstLayer  int `msgpack:"first_layer,omitempty"`
	ModelLayers int `msgpack:"model_layers,omitempty"`
}

// Block orders of [Layout.Order]: vLLM's legacy names of the head-major
// (LBHNC) and token-major (LBNHC) layouts.
const (
	OrderHND = "HND"
	OrderNHD = "NHD"
)

// nhd reports whether blocks are token-major.
func (l *Layout) nhd() bool { return l.Order == OrderNHD }

// NumRegions returns the number of regions the layout must have: 2*NumLayers,
// or NumLayers with MLA or KVPacked; with Groups, len(Regions) (the groups
// say which region is which).
func (l *Layout) NumRegions() int {
	if len(l.Groups) > 0 {
		return len(l.Regions)
	}
	if l.MLA || l.KVPacked {
		return l.NumLayers
	}
	return 2 * l.NumLayers
}

// BlockLen returns the bytes of one block in one region:
// BlockSize*KVHeads*HeadBytes. With Groups it is the length of a full
// attention block at the layout's BlockSize; a region's own is
// [Layout.BlockLenOf].
func (l *Layout) BlockLen() uint64 {
	return uint64(l.BlockSize) * uint64(l.KVHeads) * uint64(l.HeadBytes)
}

// RegionLen returns the bytes of one region: NumBlocks*BlockLen (with
// Groups, see [Layout.RegionLenOf]).
func (l *Layout) RegionLen() uint64 { return uint64(l.NumBlocks) * l.BlockLen() }

// DescID returns the index of (region, block) in BlockDescs:
// region*NumBlocks + block.
func (l *Layout) DescID(region, block int) int { return region*l.NumBlocks + block }

// TotalKVHeads returns the model's KV head count as this layout implies it:
// KVHeads for MLA, else ModelKVHeads or, when that is 0, KVHeads*TPSize.
func (l *Layout) TotalKVHeads() int {
	switch {
	case l.MLA:
		return l.KVHeads
	case l.ModelKVHeads > 0:
		return l.ModelKVHeads
	}
	return l.KVHeads * l.TPSize
}

// FirstHead returns the model index of the first KV head this rank holds
// (0 for MLA); the rank holds KVHeads heads from there.
func (l *Layout) FirstHead() int { return l.firstHeadOf(l.TPRank) }

// firstHeadOf is FirstHead for another rank of the same engine.
func (l *Layout) firstHeadOf(rank int) int {
	if l.MLA {
		return 0
	}
	total := l.TotalKVHeads()
	if l.TPSize > total {
		return rank / (l.TPSize / total)
	}
	return rank * l.KVHeads
}

// RegList returns the registration list: one descriptor per region covering
// its NumBlocks*BlockLen bytes, in region order.
func (l *Layout) RegList() nixl.RegList {
	lens := l.regionLens()
	descs := make([]nixl.RegDesc, len(l.Regions))
	for i, r := range l.Regions {
		descs[i] = nixl.RegDesc{Desc: nixl.Desc{Addr: r.Base, Len: lens[i], DevID: r.DevID}}
	}
	return nixl.RegList{Mem: l.Mem, Descs: descs}
}

// BlockDescs returns one descriptor per (region, block), in DescID order
// (region*NumBlocks + block; each region's blocks of its own length with
// Groups): the list a connector prepares once with
// PrepXferDlist to address blocks by index.
func (l *Layout) BlockDescs() nixl.XferList {
	lens := l.regionLens()
	descs := make([]nixl.Desc, 0, len(l.Regions)*l.NumBlocks)
	for i, r := range l.Regions {
		n := lens[i] / uint64(max(l.NumBlocks, 1))
		for b := 0; b < l.NumBlocks; b++ {
			descs = append(descs, nixl.Desc{Addr: r.Base + uint64(b)*n, Len: n, DevID: r.DevID})
		}
	}
	return nixl.XferList{Mem: l.Mem, Descs: descs}
}

// BlockDesc returns the descriptor of one block of one region. It does not
// check the indexes (it panics on a region out of range, like a slice); see
// Validate and the mapping functions for checked use.
func (l *Layout) BlockDesc(region, block int) nixl.Desc {
	r := l.Regions[region]
	n := l.BlockLenOf(region)
	return nixl.Desc{Addr: r.Base + uint64(block)*n, Len: n, DevID: r.DevID}
}
