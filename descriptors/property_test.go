package descriptors

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gonixl/gonixl/nixl"
)

// scenario is a random valid pair of engines and one request between them.
type scenario struct {
	src, dst []*Layout // every rank of each engine
	req      Request
	tokens   int // request length in tokens
}

func (s scenario) String() string {
	a, b := s.src[0], s.dst[0]
	return fmt.Sprintf("MLA=%v layers=%d headBytes=%d | src TP %d heads/rank %d model %d blockTokens %d blocks %d | dst TP %d heads/rank %d model %d blockTokens %d blocks %d | tokens %d src %v dst cached %d %v",
		a.MLA, a.NumLayers, a.HeadBytes, a.TPSize, a.KVHeads, a.TotalKVHeads(), a.BlockSize, a.NumBlocks,
		b.TPSize, b.KVHeads, b.TotalKVHeads(), b.BlockSize, b.NumBlocks, s.tokens, s.req.SrcBlocks, s.req.DstCached, s.req.DstBlocks)
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// tpChoices lists TP sizes that can hold total KV heads: divisors of total,
// and multiples (replicated heads) up to 16.
func tpChoices(total int) []int {
	var out []int
	for tp := 1; tp <= 16; tp++ {
		if total%tp == 0 || (tp > total && tp%total == 0) {
			out = append(out, tp)
		}
	}
	return out
}

// engine builds every rank of one engine with regions laid out in random
// order, back to back or with gaps, on one or two devices.
func engine(rng *rand.Rand, mla bool, layers, total, tp, blockTokens, blocks, headBytes int) []*Layout {
	kvHeads, model := total/tp, 0
	if mla {
		kvHeads, tp = total, max(tp, 1)
	} else if tp > total {
		kvHeads, model = 1, total
	}
	mem := pick(rng, nixl.DRAM, nixl.VRAM)
	ranks := make([]*Layout, tp)
	for r := range ranks {
		l := &Layout{Mem: mem, NumLayers: layers, NumBlocks: blocks, BlockSize: blockTokens, KVHeads: kvHeads,
			ModelKVHeads: model, HeadBytes: headBytes, DType: "bfloat16", MLA: mla, TPRank: r, TPSize: tp}
		n := l.NumRegions()
		l.Regions = make([]Region, n)
		order := rng.Perm(n)
		next := map[uint64]uint64{0: 0x1000, 1: 0x1000}
		for _, i := range order {
			dev := uint64(r)
			if rng.IntN(4) == 0 {
				dev = uint64(rng.IntN(2))
			}
			l.Regions[i] = Region{Base: next[dev], DevID: dev}
			next[dev] += l.RegionLen() + uint64(pick(rng, 0, 0, 1, 64))
		}
		if err := l.Validate(); err != nil {
			panic(err)
		}
		ranks[r] = l
	}
	return ranks
}

// blockIDs returns n distinct block ids of numBlocks: consecutive runs when
// contiguous (so coalescing has work), else random.
func blockIDs(rng *rand.Rand, n, numBlocks int) []int {
	if rng.IntN(3) == 0 {
		start := rng.IntN(numBlocks - n + 1)
		ids := make([]int, n)
		for i := range ids {
			ids[i] = start + i
		}
		return ids
	}
	return rng.Perm(numBlocks)[:n]
}

func randomScenario(rng *rand.Rand) scenario {
	mla := rng.IntN(5) == 0
	layers := 1 + rng.IntN(3)
	headBytes := pick(rng, 1, 2, 3, 4)
	var total, srcTP, dstTP int
	if mla {
		total, srcTP, dstTP = pick(rng, 1, 2), pick(rng, 1, 2, 3, 4), pick(rng, 1, 2, 3, 4)
	} else {
		total = pick(rng, 1, 2, 3, 4, 6, 8)
		srcTP, dstTP = pick(rng, tpChoices(total)...), pick(rng, tpChoices(total)...)
	}
	base, ratio := pick(rng, 1, 2, 3, 4), pick(rng, 1, 1, 2, 3, 4)
	srcBT, dstBT := base, base
	if rng.IntN(2) == 0 {
		srcBT *= ratio
	} else {
		dstBT *= ratio
	}
	srcBlocks, dstBlocks := 1+rng.IntN(12), 1+rng.IntN(12)
	maxTokens := min(srcBlocks*srcBT, dstBlocks*dstBT)
	tokens := 1 + rng.IntN(maxTokens)
	src := engine(rng, mla, layers, total, srcTP, srcBT, srcBlocks, headBytes)
	dst := engine(rng, mla, layers, total, dstTP, dstBT, dstBlocks, headBytes)

	dstAll := (tokens + dstBT - 1) / dstBT
	cached := 0
	if rng.IntN(2) == 0 {
		cached = rng.IntN(dstAll + 1) // sometimes everything is cached
	}
	req := Request{
		SrcBlocks: blockIDs(rng, (tokens+srcBT-1)/srcBT, srcBlocks),
		DstBlocks: blockIDs(rng, dstAll-cached, dstBlocks),
		DstCached: cached,
	}
	return scenario{src: src, dst: dst, req: req, tokens: tokens}
}

// checkScenario maps the request into every destination rank from each of
// its sources, simulates the copies uncoalesced and coalesced, and checks the
// destination bytes.
func checkScenario(sc scenario, reused *Transfer) error {
	srcMem := newMemory(sc.src, true)
	plain := newMemory(sc.dst, false)
	merged := newMemory(sc.dst, false)
	s0, d0 := sc.src[0], sc.dst[0]
	cachedTokens := sc.req.DstCached * d0.BlockSize
	moved := 0
	if len(sc.req.DstBlocks) > 0 {
		moved = min(len(sc.req.SrcBlocks)*s0.BlockSize, (sc.req.DstCached+len(sc.req.DstBlocks))*d0.BlockSize) - cachedTokens
		if moved < sc.tokens-cachedTokens {
			return fmt.Errorf("test bug: moved %d < %d", moved, sc.tokens-cachedTokens)
		}
	}
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
		if len(sources) == 0 {
			return fmt.Errorf("dst rank %d: no sources", r)
		}
		for _, s := range sources {
			if !feeds[[2]int{s, r}] {
				return fmt.Errorf("Sources(dst %d) has %d but Targets(src %d) lacks %d", r, s, s, r)
			}
			delete(feeds, [2]int{s, r})
			t, err := MapRequest(sc.src[s], dl, sc.req)
			if err != nil {
				return fmt.Errorf("MapRequest src %d dst %d: %w", s, r, err)
			}
			c, st := Coalesce(t)
			f, fst, err := MapCoalesced(sc.src[s], dl, sc.req)
			if err != nil {
				return fmt.Errorf("MapCoalesced src %d dst %d: %w", s, r, err)
			}
			if !reflect.DeepEqual(c, f) || st != fst {
				return fmt.Errorf("src %d dst %d: Coalesce(MapRequest) = %d pairs %v, MapCoalesced = %d pairs %v", s, r, c.Len(), st, f.Len(), fst)
			}
			ist, err := MapCoalescedInto(reused, sc.src[s], dl, sc.req)
			if err != nil || ist != fst || !sameDescs(reused.Src.Descs, f.Src.Descs) || !sameDescs(reused.Dst.Descs, f.Dst.Descs) ||
				reused.Bytes != f.Bytes || reused.Src.Mem != f.Src.Mem || reused.Dst.Mem != f.Dst.Mem {
				return fmt.Errorf("src %d dst %d: MapCoalescedInto differs from MapCoalesced (err %v)", s, r, err)
			}
			if st.Before != t.Len() || st.After != c.Len() || c.Bytes != t.Bytes {
				return fmt.Errorf("src %d dst %d: stats %+v for %d -> %d pairs, bytes %d -> %d", s, r, st, t.Len(), c.Len(), t.Bytes, c.Bytes)
			}
			if again, st2 := Coalesce(c); !reflect.DeepEqual(again, c) || st2.Before != st2.After {
				return fmt.Errorf("src %d dst %d: coalescing twice changed the lists", s, r)
			}
			if err := maximal(c, dl); err != nil {
				return fmt.Errorf("src %d dst %d: %w", s, r, err)
			}
			if err := copyTransfer(t, srcMem, s, plain, r); err != nil {
				return fmt.Errorf("src %d dst %d uncoalesced: %w", s, r, err)
			}
			if err := copyTransfer(c, srcMem, s, merged, r); err != nil {
				return fmt.Errorf("src %d dst %d coalesced: %w", s, r, err)
			}
		}
		pickSrc := func(head int) int {
			if dl.MLA {
				return sources[0]
			}
			found := -1
			for _, s := range sources {
				sl := sc.src[s]
				if head >= sl.FirstHead() && head < sl.FirstHead()+sl.KVHeads {
					if found >= 0 {
						return -1
					}
					found = s
				}
			}
			return found
		}
		for h := dl.FirstHead(); h < dl.FirstHead()+dl.KVHeads && !dl.MLA; h++ {
			if pickSrc(h) < 0 {
				return fmt.Errorf("dst rank %d head %d: sources %v hold it %s", r, h, sources, "zero or several times")
			}
		}
		if err := expectDestination(sc.src, pickSrc, plain, r, sc.req, moved); err != nil {
			return fmt.Errorf("dst rank %d uncoalesced: %w", r, err)
		}
		if err := expectDestination(sc.src, pickSrc, merged, r, sc.req, moved); err != nil {
			return fmt.Errorf("dst rank %d coalesced: %w", r, err)
		}
	}
	if len(feeds) != 0 {
		return fmt.Errorf("Targets name pairs that Sources does not: %v", feeds)
	}
	return nil
}

// maximal checks that no two consecutive pairs of one region could still be
// merged: coalescing left nothing on the table.
func maximal(t Transfer, dst *Layout) error {
	for i := 1; i < t.Len(); i++ {
		ps, pd, s, d := t.Src.Descs[i-1], t.Dst.Descs[i-1], t.Src.Descs[i], t.Dst.Descs[i]
		sameRegion := regionOf(dst, pd) == regionOf(dst, d)
		if sameRegion && ps.End() == s.Addr && pd.End() == d.Addr && ps.DevID == s.DevID && pd.DevID == d.DevID {
			return fmt.Errorf("pairs %d and %d are adjacent on both sides but not merged", i-1, i)
		}
	}
	return nil
}

func regionOf(l *Layout, d nixl.Desc) int {
	for r, reg := range l.Regions {
		if reg.DevID == d.DevID && d.Addr >= reg.Base && d.Addr < reg.Base+l.RegionLen() {
			return r
		}
	}
	return -1
}

func TestMapPropertyRandomLayouts(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 300
	}
	rng := rand.New(rand.NewPCG(4, 2026))
	reused := &Transfer{} // one buffer through every case, as a connector keeps it
	for i := 0; i < n; i++ {
		sc := randomScenario(rng)
		if err := checkScenario(sc, reused); err != nil {
			t.Fatalf("case %d: %v\n%v", i, err, sc)
		}
	}
}

// sameDescs compares lists by content; a reused buffer is empty, not nil.
func sameDescs(a, b []nixl.Desc) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
