// Package grouptest is the test kit both connectors' grouped tests share:
// the two grouped model shapes (a sliding-window model and a hybrid
// attention + Mamba model), a fill of a prefill rank's listed blocks with
// bytes that name their place in the model, a semantic check of a decode
// rank's blocks against that fill, and the whole decode memory a request
// must leave (so that a byte written where no block of the request lies
// is caught too). It is imported by tests only.
package grouptest

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
)

// Shapes are the grouped model shapes the tests run, by name.
var Shapes = []string{"swa", "hybrid"}

// Geometry returns shape's geometry at TP size tp and block size bs:
// "swa" is 1 full-attention layer beside 1 sliding-window layer (window 24
// tokens), "hybrid" 1 full-attention layer beside 2 Mamba2 layers (conv x,
// B, C and a temporal state, split over the TP ranks). Both have 2 KV
// heads of 8 bytes per token and 32 blocks.
func Geometry(shape string, tp, bs int) descriptors.Geometry {
	g := descriptors.Geometry{Layers: 2, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: bs, Blocks: 32, TPSize: tp}
	switch shape {
	case "swa":
		g.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 1}, {Kind: descriptors.KindSlidingWindow, Layers: 1, Window: 24}}
	case "hybrid":
		g.Layers = 3
		g.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 1},
			{Kind: descriptors.KindSSM, Layers: 2, Conv: []int{24, 8, 8}, State: 32}}
	case "hybrid-1kv":
		// The hybrid with one KV head: at TP 2 both ranks hold it (replicated
		// attention) while the SSM state is split; not in Shapes.
		g.Layers, g.KVHeads = 3, 1
		g.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 1},
			{Kind: descriptors.KindSSM, Layers: 2, Conv: []int{24, 8, 8}, State: 32}}
	default:
		panic("grouptest: unknown shape " + shape)
	}
	return g
}

// Rank is one rank's cache: its layout and its memory, whose first byte
// is at address Base.
type Rank struct {
	L    *descriptors.Layout
	Mem  []byte
	Base uint64
}

// Value is the byte a fill writes at byte i of part (region, a, b, c): for
// attention a is the model head and b the token; for SSM a is the part and
// b the slot's position from the end of the list, c the byte in the
// model's part.
func Value(seed, region, a, b, c int) byte {
	x := uint32(seed)*2654435761 ^ uint32(region)*40503 ^ uint32(a)*9176 ^ uint32(b)*31337 ^ uint32(c)*7
	x ^= x >> 13
	x *= 0x5bd1e995
	return byte(x ^ x>>15)
}

// each calls f for every byte of the request's listed blocks on rank r:
// its offset in Mem and the Value coordinates. lists are the rank's lists,
// tokens the request's length; only tokens in [from[g], tokens) of
// attention group g are visited (nil: the whole list).
func each(r Rank, lists [][]int, tokens int, from []int, f func(off uint64, region, a, b, c int)) {
	l := r.L
	for gi, g := range l.GroupList() {
		ids := lists[gi]
		for _, reg := range g.Regions {
			base := l.Regions[reg].Base - r.Base
			bl := l.BlockLenOf(reg)
			if g.Kind == descriptors.KindSSM {
				for j, slot := range ids {
					off, k := 0, len(ids)-1-j
					parts := append(append([]int{}, g.SSM.Conv...), g.SSM.State)
					for p, n := range parts {
						for i := 0; i < n; i++ {
							f(base+uint64(slot)*bl+uint64(off+i), reg, p, k, l.TPRank*n+i)
						}
						off += n
					}
				}
				continue
			}
			bs := l.BlockSize
			if g.BlockSize != 0 {
				bs = g.BlockSize
			}
			last := (tokens - 1) / bs
			first := last - len(ids) + 1
			for j, blk := range ids {
				for t := 0; t < bs; t++ {
					tok := (first+j)*bs + t
					if tok >= tokens || (from != nil && tok < from[gi]) {
						continue
					}
					for h := 0; h < l.KVHeads; h++ {
						// Head-major (HND) blocks hold a head's tokens together,
						// token-major (NHD) ones a token's heads.
						at := h*bs*l.HeadBytes + t*l.HeadBytes
						if l.Order == descriptors.OrderNHD {
							at = t*l.KVHeads*l.HeadBytes + h*l.HeadBytes
						}
						for i := 0; i < l.HeadBytes; i++ {
							f(base+uint64(blk)*bl+uint64(at+i), reg, l.FirstHead()+h, tok, i)
						}
					}
				}
			}
		}
	}
}

// Fill writes request seed's bytes into rank r's listed blocks.
func Fill(seed int, r Rank, lists [][]int, tokens int) {
	each(r, lists, tokens, nil, func(off uint64, region, a, b, c int) { r.Mem[off] = Value(seed, region, a, b, c) })
}

// Start returns the first token each attention group of the request
// moves into a destination: the start of the destination's list, or for a
// sliding window the later start of the two lists (tokens before the
// source's list lie outside the window and are not moved).
func Start(l *descriptors.Layout, src, dst [][]int, tokens int, srcBS, dstBS int) []int {
	out := make([]int, len(dst))
	for gi, g := range l.GroupList() {
		if g.Kind == descriptors.KindSSM {
			continue
		}
		d := ((tokens-1)/dstBS - len(dst[gi]) + 1) * dstBS
		if g.Kind == descriptors.KindSlidingWindow {
			d = max(d, ((tokens-1)/srcBS-len(src[gi])+1)*srcBS)
		}
		out[gi] = max(d, 0)
	}
	return out
}

// Verify checks that decode rank r holds request seed's bytes in its
// listed blocks from token from[g] of each attention group on, and the
// state of its slots (paired from the end with the source's); it returns
// the first wrong byte and how many bytes it checked.
func Verify(seed int, r Rank, lists [][]int, tokens int, from []int) (int, error) {
	var bad error
	n := 0
	each(r, lists, tokens, from, func(off uint64, region, a, b, c int) {
		n++
		if want := Value(seed, region, a, b, c); bad == nil && r.Mem[off] != want {
			bad = fmt.Errorf("rank %d byte %d (region %d, %d/%d/%d): got %#x, want %#x", r.L.TPRank, off, region, a, b, c, r.Mem[off], want)
		}
	})
	return n, bad
}

// Wrong returns how many bytes of request seed's Verify checks on rank r
// are wrong, and how many it checked.
func Wrong(seed int, r Rank, lists [][]int, tokens int, from []int) (wrong, checked int) {
	each(r, lists, tokens, from, func(off uint64, region, a, b, c int) {
		checked++
		if r.Mem[off] != Value(seed, region, a, b, c) {
			wrong++
		}
	})
	return wrong, checked
}

// Expect returns decode rank dst's whole memory after the request: before,
// with every pair of every source rank's mapping (descriptors.Sources,
// MapGroupsRequest) copied in from the sources' memories.
func Expect(srcs []Rank, dst Rank, before []byte, req descriptors.GroupRequest) ([]byte, error) {
	out := append([]byte(nil), before...)
	sources, err := descriptors.Sources(srcs[0].L, dst.L)
	if err != nil {
		return nil, err
	}
	for _, s := range sources {
		t, err := descriptors.MapGroupsRequest(srcs[s].L, dst.L, req)
		if err != nil {
			return nil, err
		}
		for i, sd := range t.Src.Descs {
			dd := t.Dst.Descs[i]
			so, do := sd.Addr-srcs[s].Base, dd.Addr-dst.Base
			copy(out[do:do+dd.Len], srcs[s].Mem[so:so+sd.Len])
		}
	}
	return out, nil
}

// Poison is the byte campaigns keep in blocks the engine holds free, so
// that a write after their release shows.
const Poison = 0xEE

// blockSpans calls f with every byte span of rank r's listed blocks, group
// by group.
func blockSpans(r Rank, lists [][]int, f func(g, blk int, span []byte)) {
	l := r.L
	for gi, g := range l.GroupList() {
		for _, reg := range g.Regions {
			base, bl := l.Regions[reg].Base-r.Base, l.BlockLenOf(reg)
			for _, blk := range lists[gi] {
				off := base + uint64(blk)*bl
				f(gi, blk, r.Mem[off:off+bl])
			}
		}
	}
}

// PoisonBlocks fills rank r's listed blocks with Poison.
func PoisonBlocks(r Rank, lists [][]int) {
	blockSpans(r, lists, func(_, _ int, span []byte) {
		for i := range span {
			span[i] = Poison
		}
	})
}

// Unpoisoned returns how many listed blocks (per region) of rank r do not
// hold Poison only, and the first of them.
func Unpoisoned(r Rank, lists [][]int) (n int, first string) {
	blockSpans(r, lists, func(g, blk int, span []byte) {
		for _, b := range span {
			if b != Poison {
				if n == 0 {
					first = fmt.Sprintf("rank %d group %d block %d", r.L.TPRank, g, blk)
				}
				n++
				return
			}
		}
	})
	return n, first
}

// Alloc is an engine's block allocator for a grouped layout, one free list
// per group: blocks come back in any order, so requests get scattered
// blocks that earlier requests used.
type Alloc struct{ free [][]int }

// NewAlloc returns an allocator of every logical block of every group of l.
func NewAlloc(l *descriptors.Layout) *Alloc {
	a := &Alloc{}
	for _, g := range l.GroupList() {
		n := l.NumBlocks / max(g.PhysicalPerLogical, 1)
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		a.free = append(a.free, ids)
	}
	return a
}

// Take returns counts[g] blocks of each group g, or false (taking none)
// when some group has too few free.
func (a *Alloc) Take(counts []int) ([][]int, bool) {
	for g, n := range counts {
		if len(a.free[g]) < n {
			return nil, false
		}
	}
	out := make([][]int, len(counts))
	for g, n := range counts {
		f := a.free[g]
		out[g] = append([]int{}, f[len(f)-n:]...)
		a.free[g] = f[:len(f)-n]
	}
	return out, true
}

// Give puts lists back.
func (a *Alloc) Give(lists [][]int) {
	for g, l := range lists {
		a.free[g] = append(a.free[g], l...)
	}
}

// Free returns every free block, per group.
func (a *Alloc) Free() [][]int {
	out := make([][]int, len(a.free))
	for g, f := range a.free {
		out[g] = append([]int{}, f...)
	}
	return out
}

// Counts returns how many blocks each group of a request of tokens lists
// on a side of block size bs: a full group every block, less hit blocks
// of a decode prefix hit (the first ones); a sliding window the blocks
// holding its window; an SSM group one state slot.
func Counts(l *descriptors.Layout, tokens, bs, hit int) []int {
	gs := l.GroupList()
	out := make([]int, len(gs))
	for i, g := range gs {
		switch g.Kind {
		case descriptors.KindSSM:
			out[i] = 1
		case descriptors.KindSlidingWindow:
			out[i] = (tokens-1)/bs - max(tokens-g.Window, 0)/bs + 1
		default:
			out[i] = (tokens+bs-1)/bs - hit
		}
	}
	return out
}
