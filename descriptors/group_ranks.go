package descriptors

import (
	"fmt"
	"slices"
)

// compatibleGroups is Compatible for two checked layouts of which at least
// one has groups.
func compatibleGroups(src, dst *Layout) error {
	switch {
	case src.DType != dst.DType:
		return differ("DType", src.DType, dst.DType)
	case src.NumLayers != dst.NumLayers:
		return differ("NumLayers", src.NumLayers, dst.NumLayers)
	}
	sg, dg := src.GroupList(), dst.GroupList()
	if len(sg) != len(dg) {
		return differ("KV-cache group counts", len(sg), len(dg))
	}
	for i := range sg {
		if err := compatibleGroup(src, dst, i, &sg[i], &dg[i]); err != nil {
			return err
		}
	}
	return nil
}

func compatibleGroup(src, dst *Layout, i int, a, b *Group) error {
	field := func(name string) string { return fmt.Sprintf("Groups[%d].%s", i, name) }
	switch {
	case a.Kind != b.Kind:
		return differ(field("Kind"), a.Kind, b.Kind)
	case len(a.Regions) != len(b.Regions):
		return differ(field("Regions counts"), len(a.Regions), len(b.Regions))
	case a.Window != b.Window:
		return differ(field("Window"), a.Window, b.Window)
	}
	if a.Kind == KindSSM {
		return compatibleSSM(src, dst, i, a.SSM, b.SSM)
	}
	sv, dv := src.view(a), dst.view(b)
	if err := compatibleSingle(&sv, &dv); err != nil {
		e := err.(*mappingError)
		return &mappingError{kind: e.kind, msg: fmt.Sprintf("Groups[%d] (%s): %s", i, a.Kind, e.msg)}
	}
	return nil
}

// compatibleSSM requires the model's state to be the same on both sides:
// the same parts, each of the same bytes over all ranks.
func compatibleSSM(src, dst *Layout, i int, a, b *SSMState) error {
	if len(a.Conv) != len(b.Conv) {
		return differ(fmt.Sprintf("Groups[%d].SSM.Conv part counts", i), len(a.Conv), len(b.Conv))
	}
	total := func(per, tp int) int { return per * tp }
	for k := range a.Conv {
		if total(a.Conv[k], src.TPSize) != total(b.Conv[k], dst.TPSize) {
			return incompatiblef("Groups[%d].SSM.Conv[%d] model bytes differ: source %d (%d x TPSize %d), destination %d (%d x TPSize %d)",
				i, k, total(a.Conv[k], src.TPSize), a.Conv[k], src.TPSize, total(b.Conv[k], dst.TPSize), b.Conv[k], dst.TPSize)
		}
	}
	if total(a.State, src.TPSize) != total(b.State, dst.TPSize) {
		return incompatiblef("Groups[%d].SSM.State model bytes differ: source %d (%d x TPSize %d), destination %d (%d x TPSize %d)",
			i, total(a.State, src.TPSize), a.State, src.TPSize, total(b.State, dst.TPSize), b.State, dst.TPSize)
	}
	return nil
}

// groupSources is Sources for a compatible pair with groups: the union of
// every group's source ranks.
func groupSources(src, dst *Layout) []int {
	var out []int
	sg, dg := src.GroupList(), dst.GroupList()
	for i := range sg {
		out = append(out, groupSourcesOf(src, dst, &sg[i], &dg[i])...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// groupSourcesOf returns the source ranks of one group for dst.TPRank.
func groupSourcesOf(src, dst *Layout, a, b *Group) []int {
	if a.Kind == KindSSM {
		return ssmSources(src.TPSize, dst.TPSize, dst.TPRank)
	}
	sv, dv := src.view(a), dst.view(b)
	return attentionSources(&sv, &dv)
}

// ssmSources returns the source ranks whose share of a state part overlaps
// destination rank d's: rank s of TP m holds the fraction [s/m, (s+1)/m)
// of every part.
func ssmSources(srcTP, dstTP, d int) []int {
	var out []int
	for s := 0; s < srcTP; s++ {
		if s*dstTP < (d+1)*srcTP && d*srcTP < (s+1)*dstTP {
			out = append(out, s)
		}
	}
	return out
}
