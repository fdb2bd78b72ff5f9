package descriptors

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gonixl/gonixl/nixl"
)

// modelSpec is a random model of several KV-cache groups, the same on both
// engines: which groups it has and their model-wide sizes.
type modelSpec struct {
	full, swa, mla, ssm int // layers per kind (0: no such group)
	window              int
	heads, headBytes    int // attention (full, SWA): model KV heads
	mlaHeadBytes        int
	packed              bool
	conv                []int // SSM parts over the whole model (bytes)
	state               int
}

func (m modelSpec) String() string {
	return fmt.Sprintf("full %d swa %d (W %d) mla %d ssm %d heads %d hb %d packed %v conv %v state %d",
		m.full, m.swa, m.window, m.mla, m.ssm, m.heads, m.headBytes, m.packed, m.conv, m.state)
}

// groupScenario is a random pair of grouped engines and one request.
type groupScenario struct {
	model    modelSpec
	src, dst []*Layout
	req      GroupRequest
}

func (s groupScenario) String() string {
	side := func(l *Layout) string {
		return fmt.Sprintf("TP %d bs %d order %q regions %d groups %+v", l.TPSize, l.BlockSize, l.Order, len(l.Regions), l.Groups)
	}
	return fmt.Sprintf("%v\nsrc %s\ndst %s\ntokens %d src %v dst %v", s.model, side(s.src[0]), side(s.dst[0]), s.req.Tokens, s.req.Src, s.req.Dst)
}

// randomModel draws a model; SSM part sizes are multiples of 12 so that
// TP sizes 1 to 4 split them into whole bytes.
func randomModel(rng *rand.Rand) modelSpec {
	m := modelSpec{heads: pick(rng, 1, 2, 4), headBytes: pick(rng, 2, 4), mlaHeadBytes: pick(rng, 4, 8), packed: rng.IntN(2) == 0}
	switch rng.IntN(5) {
	case 0: // full + sliding window
		m.full, m.swa = 1+rng.IntN(2), 1+rng.IntN(2)
	case 1: // hybrid: full attention + Mamba
		m.full, m.ssm = 1, 1+rng.IntN(2)
	case 2: // MLA + Mamba
		m.mla, m.ssm = 1, 1
	case 3: // everything
		m.full, m.swa, m.ssm = 1, 1, 1
	default: // sliding window alone beside MLA
		m.mla, m.swa = 1, 1
	}
	if m.swa > 0 {
		m.window = 1 + rng.IntN(12)
	}
	if m.ssm > 0 {
		for range pick(rng, 1, 3) {
			m.conv = append(m.conv, 12*(1+rng.IntN(3)))
		}
		m.state = 12 * (1 + rng.IntN(4))
	}
	return m
}

// groupEngine builds every rank of one engine of model m: TP size tp,
// kernel block size bs, r physical blocks per logical one, logical blocks
// per region, the in-block order; shared puts the groups' layers into the
// same regions where their block lengths allow (as vLLM's hybrid manager
// shares tensors).
func groupEngine(rng *rand.Rand, m modelSpec, tp, bs, r, logical int, order string, shared bool) []*Layout {
	heads, model := m.heads/tp, 0
	switch {
	case m.full == 0 && m.swa == 0:
		heads = 1 // no head-split attention: any TP size
	case tp > m.heads:
		heads, model = 1, m.heads
	}
	perLayer := 2
	if m.packed {
		perLayer = 1
	}
	mem := pick(rng, nixl.DRAM, nixl.VRAM)
	ranks := make([]*Layout, tp)
	for rank := range ranks {
		l := &Layout{Mem: mem, NumLayers: m.full + m.swa + m.mla + m.ssm, NumBlocks: logical * r, BlockSize: bs,
			KVHeads: heads, ModelKVHeads: model, HeadBytes: m.headBytes, DType: "bfloat16", KVPacked: m.packed,
			TPRank: rank, TPSize: tp, Order: order}
		attnBL := bs * heads * m.headBytes
		next := 0
		newRegions := func(n int) []int {
			out := make([]int, n)
			for i := range out {
				out[i] = next
				next++
			}
			return out
		}
		var first []int // the first attention group's regions, for sharing
		if m.full > 0 {
			first = newRegions(m.full * perLayer)
			l.Groups = append(l.Groups, Group{Kind: KindFull, Regions: first, PhysicalPerLogical: r})
		}
		if m.swa > 0 {
			g := Group{Kind: KindSlidingWindow, Window: m.window, PhysicalPerLogical: r}
			if shared && len(first) == m.swa*perLayer {
				g.Regions = slices.Clone(first)
			} else {
				g.Regions = newRegions(m.swa * perLayer)
			}
			if first == nil {
				first = g.Regions
			}
			l.Groups = append(l.Groups, g)
		}
		if m.mla > 0 {
			l.Groups = append(l.Groups, Group{Kind: KindMLA, Regions: newRegions(m.mla), PhysicalPerLogical: r,
				KVHeads: 1, HeadBytes: m.mlaHeadBytes})
		}
		if m.ssm > 0 {
			s := &SSMState{State: m.state / tp}
			for _, c := range m.conv {
				s.Conv = append(s.Conv, c/tp)
			}
			need := s.convBytes() + s.State
			g := Group{Kind: KindSSM, PhysicalPerLogical: r, SSM: s}
			if page := r * attnBL; shared && m.full > 0 && page >= need && len(first) >= m.ssm {
				s.Page = page
				g.Regions = slices.Clone(first[:m.ssm])
			} else {
				if rng.IntN(2) == 0 {
					s.Page = need + r*rng.IntN(3) // padding
				}
				for s.page()%r != 0 {
					s.Page = s.page() + 1
				}
				g.Regions = newRegions(m.ssm)
			}
			l.Groups = append(l.Groups, g)
		}
		l.Regions = make([]Region, next)
		lens := l.regionLens()
		addr := map[uint64]uint64{0: 0x1000, 1: 0x1000}
		for _, i := range rng.Perm(next) {
			dev := uint64(rank % 2)
			if rng.IntN(4) == 0 {
				dev = uint64(rng.IntN(2))
			}
			l.Regions[i] = Region{Base: addr[dev], DevID: dev}
			addr[dev] += lens[i] + uint64(pick(rng, 0, 0, 1, 64))
		}
		if err := l.Validate(); err != nil {
			panic(fmt.Sprintf("%v: %+v", err, l))
		}
		ranks[rank] = l
	}
	return ranks
}

// randomGroupScenario draws a model, two engines and a request whose
// lists follow the rules of GroupRequest.
func randomGroupScenario(rng *rand.Rand) groupScenario {
	m := randomModel(rng)
	tps := tpChoices(m.heads)
	tps = slices.DeleteFunc(tps, func(tp int) bool { return tp > 4 })
	if m.full == 0 && m.swa == 0 {
		tps = []int{1, 2, 3, 4}
	}
	srcTP, dstTP := pick(rng, tps...), pick(rng, tps...)
	base, ratio := pick(rng, 1, 2, 3), pick(rng, 1, 1, 2, 3)
	srcBS, dstBS := base, base
	if rng.IntN(2) == 0 {
		srcBS *= ratio
	} else {
		dstBS *= ratio
	}
	srcR, dstR := pick(rng, 1, 1, 2), pick(rng, 1, 1, 2)
	tokens := 1 + rng.IntN(24)
	if rng.IntN(20) == 0 {
		tokens = 0
	}
	sc := groupScenario{model: m, req: GroupRequest{Tokens: tokens}}

	// Lists first (logical ids drawn from one pool per side, so groups
	// sharing a region never name one block twice), then engines big
	// enough for them.
	type lists struct{ src, dst [][]int }
	var ls lists
	srcNeed, dstNeed := 0, 0
	kinds := []GroupKind{}
	if m.full > 0 {
		kinds = append(kinds, KindFull)
	}
	if m.swa > 0 {
		kinds = append(kinds, KindSlidingWindow)
	}
	if m.mla > 0 {
		kinds = append(kinds, KindMLA)
	}
	if m.ssm > 0 {
		kinds = append(kinds, KindSSM)
	}
	counts := make([][2]int, len(kinds))
	for i, k := range kinds {
		if k == KindSSM {
			n := 1 + rng.IntN(2)
			counts[i] = [2]int{n, rng.IntN(n + 1)}
		} else {
			sLog, dLog := srcBS*srcR, dstBS*dstR
			nS, nD := ceilDiv(tokens, sLog), ceilDiv(tokens, dLog)
			skipS := 0
			if k == KindSlidingWindow {
				skipS = rng.IntN(max(0, tokens-m.window)/sLog + 1)
			}
			// The destination starts at or after the source's first token
			// (for SWA anywhere).
			minD := 0
			if k != KindSlidingWindow {
				minD = ceilDiv(skipS*sLog, dLog)
			}
			skipD := minD + rng.IntN(nD-minD+1)
			if rng.IntN(3) != 0 && k != KindSlidingWindow {
				skipD = minD
			}
			counts[i] = [2]int{nS - skipS, nD - skipD}
		}
		srcNeed += counts[i][0]
		dstNeed += counts[i][1]
	}
	srcLogical, dstLogical := srcNeed+rng.IntN(4)+1, dstNeed+rng.IntN(4)+1
	srcPool, dstPool := rng.Perm(srcLogical), rng.Perm(dstLogical)
	if rng.IntN(3) == 0 {
		slices.Sort(srcPool)
		slices.Sort(dstPool)
	}
	for i := range kinds {
		ls.src = append(ls.src, srcPool[:counts[i][0]:counts[i][0]])
		srcPool = srcPool[counts[i][0]:]
		ls.dst = append(ls.dst, dstPool[:counts[i][1]:counts[i][1]])
		dstPool = dstPool[counts[i][1]:]
	}
	sc.req.Src, sc.req.Dst = ls.src, ls.dst
	shared := rng.IntN(2) == 0
	sc.src = groupEngine(rng, m, srcTP, srcBS, srcR, srcLogical, pick(rng, "", OrderNHD), shared)
	sc.dst = groupEngine(rng, m, dstTP, dstBS, dstR, dstLogical, pick(rng, "", OrderNHD), !shared || rng.IntN(2) == 0)
	return sc
}

// checkGroupScenario maps the request into every destination rank from each
// of its sources, simulates the copies uncoalesced and coalesced, and checks
// every destination byte against an oracle written from the definitions.
func checkGroupScenario(sc groupScenario, reused *Transfer) error {
	srcMem := newMemory(sc.src, true)
	plain := newMemory(sc.dst, false)
	merged := newMemory(sc.dst, false)
	s0, d0 := sc.src[0], sc.dst[0]
	feeds := map[[2]int]bool{}
	for s := range sc.src {
		targets, err := Targets(sc.src[s], d0)
		if err != nil {
			return err
		}
		for _, r := range targets {
			feeds[[2]int{s, r}] = true
		}
	}
	for r, dl := range sc.dst {
		sources, err := Sources(s0, dl)
		if err != nil {
			return err
		}
		for _, s := range sources {
			if !feeds[[2]int{s, r}] {
				return fmt.Errorf("Sources(dst %d) has %d but Targets(src %d) lacks %d", r, s, s, r)
			}
			delete(feeds, [2]int{s, r})
			t, err := MapGroupsRequest(sc.src[s], dl, sc.req)
			if err != nil {
				return fmt.Errorf("MapGroupsRequest src %d dst %d: %w", s, r, err)
			}
			c, st := Coalesce(t)
			f, fst, err := MapGroups(sc.src[s], dl, sc.req)
			if err != nil {
				return fmt.Errorf("MapGroups src %d dst %d: %w", s, r, err)
			}
			if !reflect.DeepEqual(c, f) || st != fst {
				return fmt.Errorf("src %d dst %d: Coalesce(MapGroupsRequest) = %d pairs %v, MapGroups = %d pairs %v", s, r, c.Len(), st, f.Len(), fst)
			}
			ist, err := MapGroupsInto(reused, sc.src[s], dl, sc.req)
			if err != nil || ist != fst || !sameDescs(reused.Src.Descs, f.Src.Descs) || !sameDescs(reused.Dst.Descs, f.Dst.Descs) || reused.Bytes != f.Bytes {
				return fmt.Errorf("src %d dst %d: MapGroupsInto differs from MapGroups (err %v)", s, r, err)
			}
			if st.Before != t.Len() || st.After != c.Len() || c.Bytes != t.Bytes {
				return fmt.Errorf("src %d dst %d: stats %+v for %d -> %d pairs, bytes %d -> %d", s, r, st, t.Len(), c.Len(), t.Bytes, c.Bytes)
			}
			if err := copyTransfer(t, srcMem, s, plain, r); err != nil {
				return fmt.Errorf("src %d dst %d uncoalesced: %w", s, r, err)
			}
			if err := copyTransfer(c, srcMem, s, merged, r); err != nil {
				return fmt.Errorf("src %d dst %d coalesced: %w", s, r, err)
			}
		}
		for _, m := range []*memory{plain, merged} {
			if err := expectGroups(sc, m, r); err != nil {
				return fmt.Errorf("dst rank %d (sources %v): %w", r, sources, err)
			}
		}
	}
	if len(feeds) != 0 {
		return fmt.Errorf("Targets name pairs that Sources does not: %v", feeds)
	}
	return nil
}

// expectGroups checks destination rank r byte by byte: every byte a group
// must receive holds the right source byte, written once, and no other byte
// of the rank was written (the writes add up to the expected bytes).
func expectGroups(sc groupScenario, m *memory, r int) error {
	dl := m.ranks[r]
	s0 := sc.src[0]
	expected := 0
	for gi := range dl.Groups {
		dg, sg := &dl.Groups[gi], &s0.Groups[gi]
		srcIDs, dstIDs := sc.req.Src[gi], sc.req.Dst[gi]
		if dg.Kind == KindSSM {
			n, err := expectSSM(sc, m, r, gi, srcIDs, dstIDs)
			if err != nil {
				return err
			}
			expected += n
			continue
		}
		T := sc.req.Tokens
		dbs, sbs := dg.blockSize(dl), sg.blockSize(s0)
		dr, sr := dg.ratio(), sg.ratio()
		sLog, dLog := sbs*sr, dbs*dr
		srcStart := (ceilDiv(T, sLog) - len(srcIDs)) * sLog
		dstStart := (ceilDiv(T, dLog) - len(dstIDs)) * dLog
		unit := min(sbs, dbs)
		first, end := max(srcStart, dstStart), ceilDiv(T, unit)*unit
		if len(dstIDs) == 0 {
			continue
		}
		heads, hb := dg.heads(dl), dg.headBytes(dl)
		mla := dg.Kind == KindMLA
		dv := dl.view(dg)
		for q, dreg := range dg.Regions {
			for k, lb := range dstIDs {
				for j := 0; j < dr; j++ {
					pb := lb*dr + j
					for tok := 0; tok < dbs; tok++ {
						tt := dstStart + (k*dr+j)*dbs + tok
						for h := 0; h < heads; h++ {
							off := tokenOff(&dv, pb, h, tok)
							if tt < first || tt >= end {
								for i := 0; i < hb; i++ {
									if n := m.writes[r][dreg][off+uint64(i)]; n != 0 {
										return fmt.Errorf("group %d region %d block %d token %d head %d: written %d times outside the moved tokens [%d, %d)", gi, dreg, pb, tok, h, n, first, end)
									}
								}
								continue
							}
							gh := dv.FirstHead() + h
							sRank := -1
							if mla {
								sRank = r % s0.TPSize
							} else {
								for s, sl := range sc.src {
									sv := sl.view(sg)
									if slices.Contains(attentionSources(&sv, &dv), s) && gh >= sv.FirstHead() && gh < sv.FirstHead()+sv.KVHeads {
										sRank = s
									}
								}
							}
							sl := sc.src[sRank]
							sv := sl.view(sg)
							sh := gh - sv.FirstHead()
							if mla {
								sh = h
							}
							pidx := (tt - srcStart) / sbs
							spb := srcIDs[pidx/sr]*sr + pidx%sr
							st := (tt - srcStart) % sbs
							for i := 0; i < hb; i++ {
								want := byteID(sRank, sg.Regions[q], tokenOff(&sv, spb, sh, st)+uint64(i))
								got, n := m.bytes[r][dreg][off+uint64(i)], m.writes[r][dreg][off+uint64(i)]
								if n != 1 || got != want {
									return fmt.Errorf("group %d (%s) region %d block %d token %d head %d byte %d: id %#x written %d times, want %#x once (src rank %d block %d token %d)",
										gi, dg.Kind, dreg, pb, tok, gh, i, got, n, want, sRank, spb, st)
								}
								expected++
							}
						}
					}
				}
			}
		}
	}
	total := 0
	for _, reg := range m.writes[r] {
		for _, n := range reg {
			total += int(n)
		}
	}
	if total != expected {
		return fmt.Errorf("%d bytes written, %d expected: something landed outside the request", total, expected)
	}
	return nil
}

// expectSSM checks one SSM group: for each slot pair (from the end of the
// lists) and layer, the destination rank's share of every part holds the
// model's bytes from whichever source rank holds them.
func expectSSM(sc groupScenario, m *memory, r, gi int, srcIDs, dstIDs []int) (int, error) {
	dl := m.ranks[r]
	dg := &dl.Groups[gi]
	srcIDs = srcIDs[len(srcIDs)-len(dstIDs):]
	dParts := dg.SSM.parts()
	n := 0
	for q, dreg := range dg.Regions {
		for k, ds := range dstIDs {
			for pi, dp := range dParts {
				for x := 0; x < dp[1]; x++ {
					g := r*dp[1] + x // byte of the model's part
					sg := &sc.src[0].Groups[gi]
					sPer := sg.SSM.parts()[pi][1]
					s := g / sPer
					sl := sc.src[s]
					sgr := &sl.Groups[gi]
					soff := uint64(srcIDs[k]*sgr.SSM.page() + sgr.SSM.parts()[pi][0] + g - s*sPer)
					want := byteID(s, sgr.Regions[q], soff)
					off := uint64(ds*dg.SSM.page() + dp[0] + x)
					got, w := m.bytes[r][dreg][off], m.writes[r][dreg][off]
					if w != 1 || got != want {
						return 0, fmt.Errorf("group %d (ssm) region %d slot %d part %d byte %d: id %#x written %d times, want %#x once (src rank %d slot %d)",
							gi, dreg, ds, pi, x, got, w, want, s, srcIDs[k])
					}
					n++
				}
			}
		}
	}
	return n, nil
}

func TestMapGroupsPropertyRandomLayouts(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewPCG(24, 1))
	reused := &Transfer{}
	for i := 0; i < n; i++ {
		sc := randomGroupScenario(rng)
		if err := checkGroupScenario(sc, reused); err != nil {
			t.Fatalf("case %d: %v\n%v", i, err, sc)
		}
	}
}
