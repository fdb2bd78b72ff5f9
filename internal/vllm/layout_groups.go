package vllm

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// How vLLM's metadata describes a model of several KV-cache groups, read in
// nixl/base_worker.py at 039e79a67a8416957c1875f9e73655a705bbcbe7
// (register_kv_caches, add_remote_agent, _build_mamba_remote) and
// ssm_conv_transfer_utils.py at 66a1a5c197f5d31bb4a00cd15d8a74c9016d577f:
//
//   - one region per registered tensor, in layer-name order; a tensor that
//     layers of several groups share (the hybrid manager's shared tensors)
//     is one region whose region_group_ids entry is -1
//     (SharedRegionGroupID), any other region's entry is its group's index
//     (the transfer group order, which is the order of the request's
//     block-id lists);
//   - block_lens[i] is the bytes of one physical (kernel) block of region
//     i: an attention page divided by physical_blocks_per_logical_kv_block,
//     and for an SSM region its state page divided by the same ratio (the
//     ratio is one per engine), with region_num_blocks[i] = num_blocks, the
//     physical count, for every region;
//   - ssm_sizes is (conv state bytes, temporal state bytes) of one slot of
//     one SSM layer on the rank, the conv state first in the page (DS
//     layout); the conv state's split into its x, B and C sub-projections
//     is not on the wire: each side derives it from its model config, so
//     here it comes from the local geometry, and ssm_sizes must agree.
//
// The groups' kinds and windows are not on the wire either (vLLM's hash
// vouches that both engines run one model): they come from the local
// geometry by group index.

// groupLayoutOf is LayoutOf for a model of several KV-cache groups (g has
// Groups): the rank's regions are the metadata's, each group's regions the
// ones region_group_ids gives it (a shared region in every group), and the
// group's kind, window and SSM state the model's at the peer's TP size.
func groupLayoutOf(m *AgentMetadata, g descriptors.Geometry, tpRank, tpSize int, mem nixl.MemType, order string) (descriptors.Layout, error) {
	ratio := m.PhysicalBlocksPerLogical
	if ratio < 1 || m.NumBlocks%ratio != 0 {
		return descriptors.Layout{}, fmt.Errorf("%w: num_blocks %d is not a multiple of physical_blocks_per_logical_kv_block %d", descriptors.ErrInvalid, m.NumBlocks, ratio)
	}
	// The model's layout at the peer's TP size and block geometry gives the
	// groups and, per group, the layers (regions) it must have.
	peer := g
	peer.TPSize, peer.Blocks, peer.BlockSize, peer.KVPacked = tpSize, m.NumBlocks, m.BlockSize, true
	if err := peer.Validate(); err != nil {
		return descriptors.Layout{}, err
	}
	ref, err := peer.Layout(mem, tpRank, nixl.Desc{Len: peer.RankBytes()})
	if err != nil {
		return descriptors.Layout{}, err
	}
	n := len(m.KVCachesBaseAddr)
	ids := m.RegionGroupIDs
	if ids == nil {
		// vLLM then takes its own region_group_ids when the region counts
		// agree; the local geometry's regions are the model's.
		if n != len(ref.Regions) {
			return descriptors.Layout{}, incompatible("region_group_ids is None and the metadata has %d regions, the model's geometry %d: the regions' KV-cache groups are unknown", n, len(ref.Regions))
		}
		ids = make([]int, n)
		for gi, rg := range ref.Groups {
			for _, r := range rg.Regions {
				ids[r] = gi
			}
		}
	}
	groups := make([]descriptors.Group, len(ref.Groups))
	for gi, rg := range ref.Groups {
		groups[gi] = descriptors.Group{Kind: rg.Kind, Window: rg.Window}
		if ratio > 1 {
			groups[gi].PhysicalPerLogical = ratio
		}
	}
	for i, id := range ids {
		switch {
		case id == SharedRegionGroupID:
			for gi := range groups {
				groups[gi].Regions = append(groups[gi].Regions, i)
			}
		case id < 0 || id >= len(groups):
			return descriptors.Layout{}, incompatible("region_group_ids[%d] is %d: the model's geometry has %d KV-cache groups", i, id, len(groups))
		default:
			groups[id].Regions = append(groups[id].Regions, i)
		}
	}
	for gi := range groups {
		if got, want := len(groups[gi].Regions), len(ref.Groups[gi].Regions); got != want {
			return descriptors.Layout{}, incompatible("region_group_ids give Groups[%d] (%s) %d regions, the model's geometry %d layers (descriptors.Geometry.Groups)", gi, groups[gi].Kind, got, want)
		}
	}
	if err := checkSSMSizes(m, ref.Groups, groups, tpSize); err != nil {
		return descriptors.Layout{}, err
	}
	attn := uint64(m.BlockSize) * uint64(ref.KVHeads) * uint64(ref.HeadBytes)
	for gi := range groups {
		grp := &groups[gi]
		for _, r := range grp.Regions {
			bl := m.BlockLens[r]
			if grp.Kind != descriptors.KindSSM {
				if bl != attn {
					return descriptors.Layout{}, incompatible("block_lens[%d] is %d, Groups[%d] (%s) of the model's geometry gives %d (%d heads x %d tokens x %d bytes)",
						r, bl, gi, grp.Kind, attn, ref.KVHeads, m.BlockSize, ref.HeadBytes)
				}
				continue
			}
			// vLLM pads a state page to the attention page when the groups
			// share tensors: the page is the region's block length times
			// the ratio, at least the conv and temporal state.
			s := grp.SSM
			page := bl * uint64(ratio)
			need := m.SSMSizes[0] + m.SSMSizes[1]
			switch {
			case page < need:
				return descriptors.Layout{}, incompatible("block_lens[%d] is %d: times physical_blocks_per_logical_kv_block %d, an SSM page of %d bytes, below ssm_sizes' %d", r, bl, ratio, page, need)
			case s.Page == 0 && page != need:
				s.Page = int(page)
			case s.Page != 0 && uint64(s.Page) != page:
				return descriptors.Layout{}, incompatible("block_lens[%d] is %d: an SSM page of %d bytes, Groups[%d]'s other regions %d", r, bl, page, gi, s.Page)
			}
		}
	}
	l := descriptors.Layout{Mem: mem, Regions: make([]descriptors.Region, n), NumLayers: ref.NumLayers, NumBlocks: m.NumBlocks,
		BlockSize: m.BlockSize, KVHeads: ref.KVHeads, ModelKVHeads: ref.ModelKVHeads, HeadBytes: ref.HeadBytes, DType: ref.DType,
		KVPacked: true, TPRank: tpRank, TPSize: tpSize, Order: order, Groups: groups}
	for i, b := range m.KVCachesBaseAddr {
		l.Regions[i] = descriptors.Region{Base: b, DevID: uint64(m.DeviceID)}
	}
	if err := l.Validate(); err != nil {
		return descriptors.Layout{}, err
	}
	return l, nil
}

// checkSSMSizes checks ssm_sizes against the model's SSM groups (refs, at
// the peer's TP size) and gives each SSM group of groups its state: the
// model's conv sub-projections and temporal state, which ssm_sizes must
// sum to.
func checkSSMSizes(m *AgentMetadata, refs, groups []descriptors.Group, tpSize int) error {
	ssm := false
	for gi := range refs {
		s := refs[gi].SSM
		if refs[gi].Kind != descriptors.KindSSM || s == nil {
			continue
		}
		ssm = true
		conv := 0
		for _, c := range s.Conv {
			conv += c
		}
		if want := [2]uint64{uint64(conv), uint64(s.State)}; m.SSMSizes != want {
			return incompatible("ssm_sizes is %v, Groups[%d] (ssm) of the model's geometry gives %v at TP size %d (conv parts %v, state %d)", m.SSMSizes, gi, want, tpSize, s.Conv, s.State)
		}
		groups[gi].SSM = &descriptors.SSMState{Conv: append([]int(nil), s.Conv...), State: s.State}
	}
	if !ssm && m.SSMSizes != [2]uint64{} {
		return incompatible("ssm_sizes is %v: the peer holds SSM (Mamba) state, the model's geometry has no SSM group", m.SSMSizes)
	}
	return nil
}

// groupMetadata fills the fields of m that a grouped layout l sets apart
// from a single-group one: region_group_ids (a region several groups name
// is SharedRegionGroupID), ssm_sizes and physical_blocks_per_logical_kv_block.
// vLLM's metadata has one block size, one ratio and one ssm_sizes per
// rank, so groups that differ in them are refused, naming the field.
func groupMetadata(l *descriptors.Layout, m *AgentMetadata) error {
	owner := make([]int, len(l.Regions))
	for i := range owner {
		owner[i] = -2
	}
	ratio := 0
	var sizes *[2]uint64
	for gi := range l.Groups {
		g := &l.Groups[gi]
		r := max(g.PhysicalPerLogical, 1)
		switch {
		case ratio == 0:
			ratio = r
		case r != ratio:
			return unsupported("physical_blocks_per_logical_kv_block: Groups[%d] has %d physical blocks per logical block, Groups[0] %d: vLLM's metadata carries one ratio", gi, r, ratio)
		}
		switch g.Kind {
		case descriptors.KindMLA:
			return unsupported("Groups[%d] is an MLA group: gonixl's vLLM protocol maps full, sliding_window and ssm groups", gi)
		case descriptors.KindSSM:
			conv := 0
			for _, c := range g.SSM.Conv {
				conv += c
			}
			page := g.SSM.Page
			if page == 0 {
				page = conv + g.SSM.State
			}
			s := [2]uint64{uint64(conv), uint64(g.SSM.State)}
			switch {
			case page%r != 0:
				return unsupported("Groups[%d] (ssm): its page of %d bytes is not a multiple of its %d physical blocks per logical block, so block_lens cannot give it", gi, page, r)
			case sizes == nil:
				sizes = &s
			case *sizes != s:
				return unsupported("ssm_sizes: Groups[%d] (ssm) has conv and state bytes %v, an earlier SSM group %v: vLLM's metadata carries one ssm_sizes", gi, s, *sizes)
			}
		default:
			if bs := g.BlockSize; bs != 0 && bs != l.BlockSize {
				return unsupported("block_size: Groups[%d] (%s) has blocks of %d tokens, the layout %d: vLLM's metadata carries one block size", gi, g.Kind, bs, l.BlockSize)
			}
		}
		for _, reg := range g.Regions {
			switch owner[reg] {
			case -2:
				owner[reg] = gi
			case gi:
			default:
				owner[reg] = SharedRegionGroupID
			}
		}
	}
	copy(m.RegionGroupIDs, owner)
	m.PhysicalBlocksPerLogical = ratio
	if sizes != nil {
		m.SSMSizes = *sizes
	}
	return nil
}
