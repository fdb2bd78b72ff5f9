package descriptors

// GroupKind names what a KV-cache group holds, as vLLM's hybrid KV-cache
// manager distinguishes its groups (one kind of layer each).
type GroupKind string

const (
	// KindFull is full attention: every token's K and V, head-split over TP
	// ranks like a layout without groups.
	KindFull GroupKind = "full"
	// KindSlidingWindow is sliding-window attention: the same blocks as
	// full attention, but a request keeps only the blocks that hold its
	// last Window tokens, so its block list is a suffix of the request.
	KindSlidingWindow GroupKind = "sliding_window"
	// KindMLA is multi-head latent attention: one latent cache per layer,
	// replicated on every TP rank.
	KindMLA GroupKind = "mla"
	// KindSSM is Mamba/GDN state: a fixed-size state per request slot
	// (logical block), made of the conv state's sub-projections and the
	// temporal (SSM) state, each split over TP ranks.
	KindSSM GroupKind = "ssm"
)

// MaxGroups bounds the groups of a layout: vLLM makes one group per kind of
// layer and per equal share of layers (Gemma 3's 5 sliding to 1 full layers
// make 6 groups), far below this.
const MaxGroups = 64

// MaxConvParts bounds the conv sub-projections of an SSM group (Mamba2 and
// GDN have 3: x, B, C; Mamba1 has 1).
const MaxConvParts = 8

// Group is one KV-cache group of a [Layout]: a set of its regions (the
// group's layers) and how blocks are laid out in them. The block ids a
// request names come per group (vLLM's remote_block_ids and
// local_block_ids, and PUSH_REG's lists, one list per group in group
// order), and are logical blocks: with PhysicalPerLogical r, logical block
// b of an attention group is the r physical blocks b*r .. b*r+r-1 of
// BlockSize tokens each, in token order.
//
// Several groups may name the same region: vLLM's hybrid manager shares one
// tensor between a layer of each group, and a shared block pool keeps the
// groups' blocks apart. Every group naming a region must then give it the
// same physical block length, and a request must not name one physical
// block of a shared region in two groups.
//
// Attention groups (full, sliding window) use the layout's KVHeads,
// ModelKVHeads, HeadBytes, KVPacked and Order: a model's attention layers
// share their head geometry. An MLA group has its own latent KVHeads and
// HeadBytes. An SSM group has SSM set and no token geometry.
type Group struct {
	// Kind is what the group holds.
	Kind GroupKind `msgpack:"kind"`
	// Regions are indexes into Layout.Regions, layer-major in model order
	// like a layout's regions (K and V per layer, one per layer when
	// packed, for MLA and for SSM).
	Regions []int `msgpack:"regions"`
	// BlockSize is the tokens of one physical (kernel) block of an
	// attention group; 0 means Layout.BlockSize. It must be 0 for SSM.
	BlockSize int `msgpack:"block_size,omitempty"`
	// PhysicalPerLogical is the physical blocks per logical block (vLLM's
	// physical_blocks_per_logical_kv_block); 0 means 1. Layout.NumBlocks
	// counts physical blocks, so it must be a multiple.
	PhysicalPerLogical int `msgpack:"physical_per_logical,omitempty"`
	// Window is the tokens a sliding-window layer attends to; set for
	// KindSlidingWindow only.
	Window int `msgpack:"window,omitempty"`
	// KVHeads and HeadBytes are an MLA group's latent heads and bytes per
	// token and head; 0 means the layout's. Other kinds leave them 0.
	KVHeads   int `msgpack:"kv_heads,omitempty"`
	HeadBytes int `msgpack:"head_bytes,omitempty"`
	// SSM is the state geometry of a KindSSM group; nil for other kinds.
	SSM *SSMState `msgpack:"ssm,omitempty"`
}

// SSMState is the per-slot state of one SSM layer on one rank, as vLLM lays
// it out with the conv state in the DS (dim, state_len) layout: one page per
// logical block (a request's state slot), holding the conv state's
// sub-projections back to back (x, then B, then C for Mamba2 and GDN), then
// the temporal state. Each part is split over TP ranks along its leading
// dimension, so a rank's share of a part is one contiguous run of the
// model's part: rank r of TP t holds bytes [r*n, (r+1)*n) of a part of t*n
// bytes. That is what lets two engines of different TP sizes exchange state
// the way vLLM's three conv reads do.
type SSMState struct {
	// Conv are the bytes of each conv sub-projection on this rank, in
	// memory order from the start of the page.
	Conv []int `msgpack:"conv"`
	// State is the bytes of the temporal state on this rank; it starts
	// right after the conv state (at the sum of Conv).
	State int `msgpack:"state"`
	// Page is the bytes of one logical block (the state slot's stride in
	// the region); 0 means the sum of Conv and State. vLLM pads it to the
	// attention page size when the groups share tensors.
	Page int `msgpack:"page,omitempty"`
}

// convBytes returns the sum of the conv parts.
func (s *SSMState) convBytes() int {
	n := 0
	for _, c := range s.Conv {
		n += c
	}
	return n
}

// page returns Page, or the conv and state bytes when it is 0.
func (s *SSMState) page() int {
	if s.Page != 0 {
		return s.Page
	}
	return s.convBytes() + s.State
}

// parts returns each part's (offset in the page, bytes on this rank): the
// conv parts in order, then the state.
func (s *SSMState) parts() [][2]int {
	out := make([][2]int, 0, len(s.Conv)+1)
	off := 0
	for _, c := range s.Conv {
		out = append(out, [2]int{off, c})
		off += c
	}
	return append(out, [2]int{off, s.State})
}

// ratio returns PhysicalPerLogical, 1 when it is 0.
func (g *Group) ratio() int { return max(g.PhysicalPerLogical, 1) }

// blockSize returns the group's tokens per physical block.
func (g *Group) blockSize(l *Layout) int {
	if g.BlockSize != 0 {
		return g.BlockSize
	}
	return l.BlockSize
}

// heads and headBytes return the group's heads per rank and bytes per
// token and head (the MLA latent ones, or the layout's).
func (g *Group) heads(l *Layout) int {
	if g.Kind == KindMLA && g.KVHeads != 0 {
		return g.KVHeads
	}
	return l.KVHeads
}

func (g *Group) headBytes(l *Layout) int {
	if g.Kind == KindMLA && g.HeadBytes != 0 {
		return g.HeadBytes
	}
	return l.HeadBytes
}

// physBlockLen returns the bytes of one physical block of the group's
// regions: BlockSize x heads x HeadBytes for attention, Page/ratio for SSM.
// The group must have passed checkGroups.
func (g *Group) physBlockLen(l *Layout) uint64 {
	if g.Kind == KindSSM {
		return uint64(g.SSM.page() / g.ratio())
	}
	return uint64(g.blockSize(l)) * uint64(g.heads(l)) * uint64(g.headBytes(l))
}

// GroupList returns the layout's groups: Groups, or for a layout without
// groups the one group it is, full attention (MLA with MLA set) over every
// region. Callers that map per group iterate over it, so a layout without
// groups needs no special case.
func (l *Layout) GroupList() []Group {
	if len(l.Groups) > 0 {
		return l.Groups
	}
	g := Group{Kind: KindFull, Regions: make([]int, len(l.Regions))}
	if l.MLA {
		g.Kind = KindMLA
	}
	for i := range g.Regions {
		g.Regions[i] = i
	}
	return []Group{g}
}

// GroupKinds returns the kinds of GroupList's groups, in order: the labels
// of per-group counters.
func (l *Layout) GroupKinds() []string {
	gs := l.GroupList()
	kinds := make([]string, len(gs))
	for i := range gs {
		kinds[i] = string(gs[i].Kind)
	}
	return kinds
}

// BlockLenOf returns the bytes of one physical block of region i: BlockLen
// for a layout without groups, else the length the groups naming region i
// give it. It returns 0 for a region no group names or out of range.
func (l *Layout) BlockLenOf(i int) uint64 {
	if len(l.Groups) == 0 {
		if i < 0 || i >= len(l.Regions) {
			return 0
		}
		return l.BlockLen()
	}
	for gi := range l.Groups {
		g := &l.Groups[gi]
		for _, r := range g.Regions {
			if r == i {
				return g.physBlockLen(l)
			}
		}
	}
	return 0
}

// RegionLenOf returns the bytes of region i: NumBlocks x BlockLenOf(i).
func (l *Layout) RegionLenOf(i int) uint64 { return uint64(l.NumBlocks) * l.BlockLenOf(i) }

// regionLens returns every region's length (one pass over the groups).
func (l *Layout) regionLens() []uint64 {
	out := make([]uint64, len(l.Regions))
	if len(l.Groups) == 0 {
		n := l.RegionLen()
		for i := range out {
			out[i] = n
		}
		return out
	}
	for gi := range l.Groups {
		g := &l.Groups[gi]
		n := uint64(l.NumBlocks) * g.physBlockLen(l)
		for _, r := range g.Regions {
			if r >= 0 && r < len(out) {
				out[r] = n
			}
		}
	}
	return out
}

// view returns the layout of one attention group as a layout without
// groups: the group's regions, block size, heads and head bytes, the
// engine's TP position, memory and order. The mapping of a group reuses the
// single-group machinery through it.
func (l *Layout) view(g *Group) Layout {
	v := Layout{Mem: l.Mem, NumBlocks: l.NumBlocks, BlockSize: g.blockSize(l), KVHeads: g.heads(l),
		ModelKVHeads: l.ModelKVHeads, HeadBytes: g.headBytes(l), DType: l.DType, KVPacked: l.KVPacked,
		TPRank: l.TPRank, TPSize: l.TPSize, Order: l.Order, Regions: make([]Region, len(g.Regions))}
	for i, r := range g.Regions {
		v.Regions[i] = l.Regions[r]
	}
	switch {
	case g.Kind == KindMLA:
		v.MLA, v.KVPacked, v.ModelKVHeads = true, false, 0
		v.NumLayers = len(g.Regions)
	case l.KVPacked:
		v.NumLayers = len(g.Regions)
	default:
		v.NumLayers = len(g.Regions) / 2
	}
	return v
}
