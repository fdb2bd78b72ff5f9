package descriptors

import (
	"math/bits"
	"strconv"
	"strings"
)

// kindNames lists the kinds for error messages.
var kindNames = `"full", "sliding_window", "mla", "ssm"`

// checkOrder verifies the in-block order field.
func (l *Layout) checkOrder() error {
	switch l.Order {
	case "", OrderHND, OrderNHD:
		return nil
	}
	return invalidf("Order %q is not %q or %q", l.Order, OrderHND, OrderNHD)
}

// checkGroups verifies Groups: every group on its own, then the regions
// they share and that every region belongs to one. It returns every
// region's length so that check can bound the addresses. Errors name the
// group, the field and its value, as in "Groups[1].Window is 0, want >= 1
// for a sliding_window group".
func (l *Layout) checkGroups() ([]uint64, error) {
	if l.MLA {
		return nil, invalidf("MLA is set with %d Groups: give the MLA layers a group of Kind %q instead", len(l.Groups), KindMLA)
	}
	if len(l.Groups) > MaxGroups {
		return nil, invalidf("len(Groups) %d is above the limit of %d", len(l.Groups), MaxGroups)
	}
	if len(l.Regions) == 0 {
		return nil, invalidf("len(Regions) is 0 with %d Groups", len(l.Groups))
	}
	if l.NumBlocks > maxDescs/len(l.Regions) {
		return nil, invalidf("NumBlocks %d x %d regions exceeds %d descriptors", l.NumBlocks, len(l.Regions), maxDescs)
	}
	lens := make([]uint64, len(l.Regions))
	owner := make([]int, len(l.Regions))
	for i := range owner {
		owner[i] = -1
	}
	// seen[r] is 1 + the group that last named region r and at[r] where,
	// so that duplicates inside a group are found without a map per group.
	seen, at := make([]int, len(l.Regions)), make([]int, len(l.Regions))
	for gi := range l.Groups {
		g := &l.Groups[gi]
		if err := l.checkGroup(gi, g, seen, at); err != nil {
			return nil, err
		}
		per := g.physBlockLen(l)
		hi, n := bits.Mul64(per, uint64(l.NumBlocks))
		if hi != 0 || per == 0 {
			return nil, invalidf("Groups[%d]: region length NumBlocks %d x block length %d overflows 64 bits", gi, l.NumBlocks, per)
		}
		for k, r := range g.Regions {
			if owner[r] >= 0 && lens[r] != n {
				return nil, invalidf("Groups[%d].Regions[%d] is region %d, which Groups[%d] gives blocks of %d bytes and this group blocks of %d bytes: groups sharing a region must agree on its block length",
					gi, k, r, owner[r], lens[r]/uint64(l.NumBlocks), per)
			}
			if owner[r] < 0 {
				owner[r], lens[r] = gi, n
			}
		}
	}
	for i, o := range owner {
		if o < 0 {
			return nil, invalidf("Regions[%d] belongs to no group", i)
		}
	}
	return lens, nil
}

// checkGroup verifies one group's own fields.
func (l *Layout) checkGroup(gi int, g *Group, seen, at []int) error {
	switch g.Kind {
	case KindFull, KindSlidingWindow, KindMLA, KindSSM:
	default:
		return invalidf("Groups[%d].Kind %q is not one of %s", gi, g.Kind, kindNames)
	}
	switch {
	case len(g.Regions) == 0:
		return invalidf("Groups[%d].Regions is empty", gi)
	case g.BlockSize < 0 || g.BlockSize > maxField:
		return invalidf("Groups[%d].BlockSize is %d, want in [0, %d] (0: the layout's)", gi, g.BlockSize, maxField)
	case g.Kind == KindSSM && g.BlockSize != 0:
		return invalidf("Groups[%d].BlockSize is %d, want 0 for an ssm group (its blocks hold state, not tokens)", gi, g.BlockSize)
	case g.PhysicalPerLogical < 0 || g.PhysicalPerLogical > maxField:
		return invalidf("Groups[%d].PhysicalPerLogical is %d, want in [0, %d] (0: 1)", gi, g.PhysicalPerLogical, maxField)
	case l.NumBlocks%g.ratio() != 0:
		return invalidf("Groups[%d].PhysicalPerLogical is %d, which does not divide NumBlocks %d", gi, g.PhysicalPerLogical, l.NumBlocks)
	case g.Kind == KindSlidingWindow && (g.Window < 1 || g.Window > maxField):
		return invalidf("Groups[%d].Window is %d, want in [1, %d] for a sliding_window group", gi, g.Window, maxField)
	case g.Kind != KindSlidingWindow && g.Window != 0:
		return invalidf("Groups[%d].Window is %d, want 0 for a %s group", gi, g.Window, g.Kind)
	case g.Kind != KindMLA && (g.KVHeads != 0 || g.HeadBytes != 0):
		return invalidf("Groups[%d].KVHeads %d and HeadBytes %d, want 0 for a %s group (it uses the layout's)", gi, g.KVHeads, g.HeadBytes, g.Kind)
	case g.KVHeads < 0 || g.KVHeads > maxField:
		return invalidf("Groups[%d].KVHeads is %d, want in [0, %d] (0: the layout's)", gi, g.KVHeads, maxField)
	case g.HeadBytes < 0 || g.HeadBytes > maxField:
		return invalidf("Groups[%d].HeadBytes is %d, want in [0, %d] (0: the layout's)", gi, g.HeadBytes, maxField)
	case g.Kind == KindSSM && g.SSM == nil:
		return invalidf("Groups[%d].SSM is nil, want the state geometry of an ssm group", gi)
	case g.Kind != KindSSM && g.SSM != nil:
		return invalidf("Groups[%d].SSM is set on a %s group", gi, g.Kind)
	case (g.Kind == KindFull || g.Kind == KindSlidingWindow) && !l.KVPacked && len(g.Regions)%2 != 0:
		return invalidf("Groups[%d].Regions has %d regions, want an even count: K and V per layer (KVPacked is false)", gi, len(g.Regions))
	}
	if len(g.Regions) > len(l.Regions) {
		return invalidf("Groups[%d].Regions has %d regions, the layout %d", gi, len(g.Regions), len(l.Regions))
	}
	for k, r := range g.Regions {
		if r < 0 || r >= len(l.Regions) {
			return invalidf("Groups[%d].Regions[%d] is %d, out of range [0, %d)", gi, k, r, len(l.Regions))
		}
		if seen[r] == gi+1 {
			return invalidf("Groups[%d].Regions[%d] is %d, already at Groups[%d].Regions[%d]", gi, k, r, gi, at[r])
		}
		seen[r], at[r] = gi+1, k
	}
	if g.Kind == KindSSM {
		return checkSSM(gi, g)
	}
	return nil
}

// checkSSM verifies an SSM group's state geometry.
func checkSSM(gi int, g *Group) error {
	s := g.SSM
	if len(s.Conv) < 1 || len(s.Conv) > MaxConvParts {
		return invalidf("Groups[%d].SSM.Conv has %d parts, want 1 to %d (x, B, C for Mamba2 and GDN; x for Mamba1)", gi, len(s.Conv), MaxConvParts)
	}
	for i, c := range s.Conv {
		if c < 1 || c > maxField {
			return invalidf("Groups[%d].SSM.Conv[%d] is %d, want in [1, %d]", gi, i, c, maxField)
		}
	}
	switch need := s.convBytes() + s.State; {
	case s.State < 1 || s.State > maxField:
		return invalidf("Groups[%d].SSM.State is %d, want in [1, %d]", gi, s.State, maxField)
	case s.Page < 0 || s.Page > 4*maxField:
		return invalidf("Groups[%d].SSM.Page is %d, want in [0, %d] (0: conv + state)", gi, s.Page, 4*maxField)
	case s.Page != 0 && s.Page < need:
		return invalidf("Groups[%d].SSM.Page is %d, below the %d bytes of conv (%s) and state (%d)", gi, s.Page, need, joinInts(s.Conv), s.State)
	case s.page()%g.ratio() != 0:
		return invalidf("Groups[%d].SSM.Page %d is not a multiple of PhysicalPerLogical %d", gi, s.page(), g.ratio())
	}
	return nil
}

// joinInts writes ints as "a+b+c".
func joinInts(xs []int) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(x))
	}
	return b.String()
}
