package descriptors

import (
	"fmt"
	"reflect"
)

// GroupGeometry is one KV-cache group of a [Geometry]: its kind and layers,
// and the sizes that are the group's own. Attention groups (full, sliding
// window) take their heads, head size and block size from the Geometry; an
// SSM group states its per-slot state over the whole model, which every
// rank holds 1/TPSize of (vLLM splits the conv channels and the SSM heads
// over TP ranks). A sliding-window model is, for instance,
//
//	Geometry{Layers: 24, KVHeads: 8, HeadDim: 64, DType: "bfloat16", BlockSize: 16, Blocks: 1024, TPSize: 2,
//		Groups: &[]GroupGeometry{{Kind: KindFull, Layers: 12}, {Kind: KindSlidingWindow, Layers: 12, Window: 128}}}
//
// and a hybrid Mamba model replaces the second group with
// {Kind: KindSSM, Layers: 12, Conv: []int{x, b, c}, State: s}. MLA groups
// are not described here (an MLA latent cache has its own head geometry):
// build such a layout's groups directly ([Group]).
type GroupGeometry struct {
	Kind   GroupKind
	Layers int // layers of this group
	Window int // tokens of the window; KindSlidingWindow only
	// Conv are the bytes of each conv sub-projection of one slot of one
	// layer over the whole model (x, B, C for Mamba2 and GDN), State the
	// temporal state's; each a multiple of TPSize. KindSSM only.
	Conv  []int
	State int
}

// groups returns the groups, nil without.
func (g Geometry) groups() []GroupGeometry {
	if g.Groups == nil {
		return nil
	}
	return *g.Groups
}

// perLayer returns the regions one layer of the group takes.
func (g Geometry) perLayer(gg *GroupGeometry) uint64 {
	if gg.Kind == KindSSM || g.KVPacked {
		return 1
	}
	return 2
}

// groupRegions is numRegions with groups.
func (g Geometry) groupRegions() uint64 {
	var n uint64
	gs := g.groups()
	for i := range gs {
		n += uint64(max(gs[i].Layers, 0)) * g.perLayer(&gs[i])
	}
	return n
}

// ssmPage returns one rank's bytes of one slot of an SSM group.
func (g Geometry) ssmPage(gg *GroupGeometry) uint64 {
	n := uint64(max(gg.State, 0))
	for _, c := range gg.Conv {
		n += uint64(max(c, 0))
	}
	return n / uint64(max(g.TPSize, 1))
}

// regionSizes returns every region's bytes, in layout order.
func (g Geometry) regionSizes() []uint64 {
	out := make([]uint64, 0, g.numRegions())
	attn := g.RegionBytes()
	gs := g.groups()
	for i := range gs {
		gg := &gs[i]
		size := attn
		if gg.Kind == KindSSM {
			size, _ = mul64(uint64(g.Blocks), g.ssmPage(gg))
		}
		for range uint64(max(gg.Layers, 0)) * g.perLayer(gg) {
			out = append(out, size)
		}
	}
	for len(out) < int(g.numRegions()) { // no groups
		out = append(out, attn)
	}
	return out
}

// groupRankBytes is RankBytes with groups: 0 on overflow.
func (g Geometry) groupRankBytes() uint64 {
	var total uint64
	attn := g.RegionBytes()
	gs := g.groups()
	for i := range gs {
		gg := &gs[i]
		size := attn
		if gg.Kind == KindSSM {
			var ok bool
			if size, ok = mul64(uint64(max(g.Blocks, 0)), g.ssmPage(gg)); !ok {
				return 0
			}
		}
		n, ok := mul64(size, uint64(max(gg.Layers, 0))*g.perLayer(gg))
		if !ok || size == 0 || total+n < total {
			return 0
		}
		total += n
	}
	return total
}

// validateGroups is the part of Validate about Groups.
func (g Geometry) validateGroups() error {
	if g.MLA {
		return invalidf("Geometry.MLA is set with Groups: describe an MLA group in the Layout (Group.KVHeads, Group.HeadBytes)")
	}
	if len(g.groups()) > MaxGroups {
		return invalidf("Geometry.Groups has %d groups, want <= %d", len(g.groups()), MaxGroups)
	}
	layers := 0
	gs := g.groups()
	for i := range gs {
		gg := &gs[i]
		switch gg.Kind {
		case KindFull, KindSlidingWindow, KindSSM:
		case KindMLA:
			return invalidf("Geometry.Groups[%d].Kind is %q: describe an MLA group in the Layout (Group.KVHeads, Group.HeadBytes)", i, gg.Kind)
		default:
			return invalidf("Geometry.Groups[%d].Kind %q is not one of %q, %q, %q", i, gg.Kind, KindFull, KindSlidingWindow, KindSSM)
		}
		switch {
		case gg.Layers < 1 || gg.Layers > MaxLayers:
			return invalidf("Geometry.Groups[%d].Layers is %d, want in [1, %d]", i, gg.Layers, MaxLayers)
		case gg.Kind == KindSlidingWindow && (gg.Window < 1 || gg.Window > maxField):
			return invalidf("Geometry.Groups[%d].Window is %d, want in [1, %d] for a sliding_window group", i, gg.Window, maxField)
		case gg.Kind != KindSlidingWindow && gg.Window != 0:
			return invalidf("Geometry.Groups[%d].Window is %d, want 0 for a %s group", i, gg.Window, gg.Kind)
		case gg.Kind != KindSSM && (len(gg.Conv) != 0 || gg.State != 0):
			return invalidf("Geometry.Groups[%d] is a %s group with Conv %v and State %d, want none", i, gg.Kind, gg.Conv, gg.State)
		}
		if gg.Kind == KindSSM {
			if err := g.validateSSM(i, gg); err != nil {
				return err
			}
		}
		layers += gg.Layers
	}
	if layers != g.Layers {
		return invalidf("Geometry.Layers is %d, the groups' layers sum to %d", g.Layers, layers)
	}
	return nil
}

func (g Geometry) validateSSM(i int, gg *GroupGeometry) error {
	if len(gg.Conv) < 1 || len(gg.Conv) > MaxConvParts {
		return invalidf("Geometry.Groups[%d].Conv has %d parts, want 1 to %d", i, len(gg.Conv), MaxConvParts)
	}
	for k, c := range gg.Conv {
		if c < 1 || c > maxField || c%g.TPSize != 0 {
			return invalidf("Geometry.Groups[%d].Conv[%d] is %d, want in [1, %d] and a multiple of TPSize %d", i, k, c, maxField, g.TPSize)
		}
	}
	if gg.State < 1 || gg.State > maxField || gg.State%g.TPSize != 0 {
		return invalidf("Geometry.Groups[%d].State is %d, want in [1, %d] and a multiple of TPSize %d", i, gg.State, maxField, g.TPSize)
	}
	return nil
}

// layoutGroups returns the Groups of a rank's layout: the regions group
// after group, layer by layer; nil without groups.
func (g Geometry) layoutGroups() []Group {
	if len(g.groups()) == 0 {
		return nil
	}
	out := make([]Group, len(g.groups()))
	next := 0
	gs := g.groups()
	for i := range gs {
		gg := &gs[i]
		n := int(uint64(gg.Layers) * g.perLayer(gg))
		grp := Group{Kind: gg.Kind, Window: gg.Window, Regions: make([]int, n)}
		for k := range grp.Regions {
			grp.Regions[k] = next
			next++
		}
		if gg.Kind == KindSSM {
			s := &SSMState{State: gg.State / g.TPSize}
			for _, c := range gg.Conv {
				s.Conv = append(s.Conv, c/g.TPSize)
			}
			grp.SSM = s
		}
		out[i] = grp
	}
	return out
}

// checkGroups is the part of Check about Groups.
func (g Geometry) checkGroups(l Layout) error {
	want := g.layoutGroups()
	if len(l.Groups) != len(want) {
		return invalidf("Layout has %d Groups, the geometry %d", len(l.Groups), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(l.Groups[i], want[i]) {
			return invalidf("Layout.Groups[%d] is %s, the geometry's is %s", i, groupString(&l.Groups[i]), groupString(&want[i]))
		}
	}
	return nil
}

// groupString writes a group for an error message.
func groupString(g *Group) string {
	s := fmt.Sprintf("{Kind %s, Regions %v", g.Kind, g.Regions)
	if g.BlockSize != 0 {
		s += fmt.Sprintf(", BlockSize %d", g.BlockSize)
	}
	if g.PhysicalPerLogical != 0 {
		s += fmt.Sprintf(", PhysicalPerLogical %d", g.PhysicalPerLogical)
	}
	if g.Window != 0 {
		s += fmt.Sprintf(", Window %d", g.Window)
	}
	if g.KVHeads != 0 || g.HeadBytes != 0 {
		s += fmt.Sprintf(", KVHeads %d, HeadBytes %d", g.KVHeads, g.HeadBytes)
	}
	if g.SSM != nil {
		s += fmt.Sprintf(", SSM {Conv %v, State %d, Page %d}", g.SSM.Conv, g.SSM.State, g.SSM.Page)
	}
	return s + "}"
}

// groupGeometryOf returns the GroupGeometry of a grouped layout's groups
// (nil without groups): per group its kind, layers, window and the SSM
// state over the whole model.
func groupGeometryOf(l *Layout) []GroupGeometry {
	if len(l.Groups) == 0 {
		return nil
	}
	out := make([]GroupGeometry, len(l.Groups))
	for i, grp := range l.Groups {
		gg := GroupGeometry{Kind: grp.Kind, Layers: len(grp.Regions), Window: grp.Window}
		if (grp.Kind == KindFull || grp.Kind == KindSlidingWindow) && !l.KVPacked {
			gg.Layers = len(grp.Regions) / 2
		}
		if grp.SSM != nil {
			gg.State = grp.SSM.State * l.TPSize
			for _, c := range grp.SSM.Conv {
				gg.Conv = append(gg.Conv, c*l.TPSize)
			}
		}
		out[i] = gg
	}
	return out
}
