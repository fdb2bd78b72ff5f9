package staging

import (
	"slices"
	"testing"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/nixl"
)

// FuzzGroupDstImage draws grouped requests (shape, TP sizes and ranks,
// block sizes, tokens and lists from the input) and checks, for every
// request the mapping accepts, the rule the push path rests on: the
// pair's mapped bytes all lie in decode's image of its lists, each image
// byte is gathered at most once, and the scatter carries every gathered
// byte to the destination address its pair names. Nothing panics on
// lists the mapping refuses.
func FuzzGroupDstImage(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 70, 3, 1, 2, 3, 2, 9, 10, 1, 4, 1, 5})
	f.Add([]byte{1, 0, 1, 1, 40, 0, 1, 9, 1, 3})
	f.Add([]byte{0, 2, 1, 2, 9, 1, 5, 1, 7, 1, 6, 1, 8})
	f.Fuzz(func(t *testing.T, in []byte) {
		next := func() int {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return int(b)
		}
		shapes := append(append([]string{}, grouptest.Shapes...), "hybrid-1kv")
		shape := shapes[next()%len(shapes)]
		tps := [][2]int{{2, 2}, {2, 1}, {1, 2}, {1, 1}}[next()%4]
		bss := [][2]int{{16, 16}, {16, 8}, {8, 16}}[next()%3]
		orders := [][2]string{{"", ""}, {descriptors.OrderNHD, ""}, {descriptors.OrderNHD, descriptors.OrderNHD}, {"", descriptors.OrderNHD}}[next()%4]
		side := 0
		mk := func(tp, rank, bs int, addr uint64) descriptors.Layout {
			g := grouptest.Geometry(shape, tp, bs)
			g.Order = orders[side]
			side++
			l, err := g.Layout(nixl.DRAM, rank, nixl.Desc{Addr: addr, Len: g.RankBytes()})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		sRank, dRank := next()%tps[0], next()%tps[1]
		src, dst := mk(tps[0], sRank, bss[0], 1<<30), mk(tps[1], dRank, bss[1], 1<<34)
		tokens := 1 + next()
		lists := func() [][]int {
			out := make([][]int, 2)
			for g := range out {
				n := next() % 8
				for range n {
					out[g] = append(out[g], next()%40) // some out of range: refused
				}
			}
			return out
		}
		req := descriptors.GroupRequest{Tokens: tokens, Src: lists(), Dst: lists()}
		im, imErr := NewGroupDstImage(&src, &dst, req.Dst)
		tr, _, err := descriptors.MapGroups(&src, &dst, req)
		if err != nil {
			return
		}
		if imErr != nil {
			if dst.Order == descriptors.OrderNHD && src.KVHeads != dst.KVHeads {
				return // refused: a prefill rank's heads are one run per token of an NHD block
			}
			t.Fatalf("the mapping takes the request, the image refuses it: %v", imErr)
		}
		if tr.Len() == 0 {
			return
		}
		slot := Slot{Addr: 1 << 40, Len: im.Size()}
		var p Planner
		plan, err := p.PlanWriteGroups(&tr, &src, &dst, im, slot, 0)
		if err != nil {
			t.Fatalf("mapped bytes outside the image: %v", err)
		}
		var gathered uint64
		spans := make([]Seg, 0, len(plan.Gather))
		for _, g := range plan.Gather {
			gathered += g.Len
			if g.Dst < slot.Addr || g.Dst+g.Len > slot.Addr+slot.Len {
				t.Fatalf("gather segment %+v outside the slot", g)
			}
			spans = append(spans, g)
		}
		if gathered != tr.Bytes {
			t.Fatalf("gathered %d bytes, the mapping moves %d", gathered, tr.Bytes)
		}
		// Every region of the image is a group this pair writes: none
		// is left to scatter the slot's stale bytes over what another
		// prefill rank writes.
		for ir := range im.Regions() {
			lo, hi := slot.Addr+im.base[ir], slot.Addr+im.base[ir+1]
			if !slices.ContainsFunc(plan.Gather, func(g Seg) bool { return g.Dst < hi && g.Dst+g.Len > lo }) {
				t.Fatalf("image region %d (layout region %d) gathers nothing", ir, im.regions[ir])
			}
		}
		slices.SortFunc(spans, func(a, b Seg) int { return int(int64(a.Dst - b.Dst)) })
		for i := 1; i < len(spans); i++ {
			if spans[i].Dst < spans[i-1].Dst+spans[i-1].Len {
				t.Fatalf("image bytes gathered twice: %+v and %+v", spans[i-1], spans[i])
			}
		}
		var scatter []Seg // Src: slot address, Dst: block address
		for _, c := range im.ScatterBlocks(&dst, slot.Addr) {
			scatter = c.Segs(scatter)
		}
		slices.SortFunc(scatter, func(a, b Seg) int { return int(int64(a.Src - b.Src)) })
		// The pairs by destination address (Src: destination, Dst:
		// source): destination bytes are distinct, source bytes may
		// repeat (a source list may name a block twice).
		pairs := make([]Seg, tr.Len())
		for i := range pairs {
			pairs[i] = Seg{Src: tr.Dst.Descs[i].Addr, Dst: tr.Src.Descs[i].Addr, Len: tr.Src.Descs[i].Len}
		}
		slices.SortFunc(pairs, func(a, b Seg) int { return int(int64(a.Src - b.Src)) })
		find := func(list []Seg, addr uint64) (Seg, bool) {
			i, _ := slices.BinarySearchFunc(list, addr, func(s Seg, a uint64) int {
				switch {
				case s.Src+s.Len <= a:
					return -1
				case s.Src > a:
					return 1
				}
				return 0
			})
			if i < len(list) && list[i].Src <= addr && addr < list[i].Src+list[i].Len {
				return list[i], true
			}
			return Seg{}, false
		}
		for _, g := range plan.Gather {
			for o := uint64(0); o < g.Len; {
				sc, ok := find(scatter, g.Dst+o)
				if !ok {
					t.Fatalf("gathered image byte %#x is in no scatter segment", g.Dst+o)
				}
				to := sc.Dst + (g.Dst + o - sc.Src)
				pr, ok := find(pairs, to)
				if !ok {
					t.Fatalf("the scatter writes gathered byte %#x to %#x, which no pair writes", g.Src+o, to)
				}
				if from := pr.Dst + (to - pr.Src); from != g.Src+o {
					t.Fatalf("destination byte %#x: the staged path brings source byte %#x, the mapping %#x", to, g.Src+o, from)
				}
				o += min(g.Len-o, pr.Src+pr.Len-to, sc.Src+sc.Len-(g.Dst+o))
			}
		}
	})
}
