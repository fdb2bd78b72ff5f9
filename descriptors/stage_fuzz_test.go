package descriptors

import (
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/nixl"
)

// FuzzStageLayoutDecode decodes a peer's layout bytes, as a decode rank
// gets a prefill stage's in the handshake, and maps a request from it onto
// a whole layout of the same model when the two are compatible: errors
// are classified, nothing panics, and every pair lies inside both sides'
// regions of the layers they share.
func FuzzStageLayoutDecode(f *testing.F) {
	g := Geometry{Layers: 3, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 4, TPSize: 1, PPSize: 2}
	for s := range 2 {
		l, err := g.StageLayout(nixl.DRAM, s, 0, nixl.Desc{Addr: 0x100000, Len: g.StageBytes(s)})
		if err != nil {
			f.Fatal(err)
		}
		b, err := msgpack.Marshal(&l)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(1), uint8(2))
	}
	whole := g
	whole.PPSize = 0
	dst, err := whole.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x800000, Len: whole.RankBytes()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte, sb, db uint8) {
		var l Layout
		if err := msgpack.Unmarshal(b, &l); err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate error %v does not match ErrInvalid", err)
			}
			return
		}
		err := Compatible(&l, &dst)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrIncompatible) {
				t.Fatalf("Compatible error %v is unclassified", err)
			}
			return
		}
		src := []int{int(sb) % l.NumBlocks}
		tr, _, err := MapCoalesced(&l, &dst, Request{SrcBlocks: src, DstBlocks: []int{int(db) % dst.NumBlocks}})
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrIncompatible) {
				t.Fatalf("MapCoalesced error %v is unclassified", err)
			}
			return
		}
		lo, hi := layerOverlap(&l, &dst)
		sv, dv := l.layerView(lo, hi), dst.layerView(lo, hi)
		inside := func(v *Layout, d nixl.Desc) bool {
			for i, r := range v.Regions {
				if d.DevID == r.DevID && d.Addr >= r.Base && d.Addr+d.Len <= r.Base+v.RegionLenOf(i) {
					return true
				}
			}
			return false
		}
		for i := range tr.Src.Descs {
			if !inside(&sv, tr.Src.Descs[i]) || !inside(&dv, tr.Dst.Descs[i]) {
				t.Fatalf("pair %d (%+v -> %+v) outside the shared layers [%d, %d)", i, tr.Src.Descs[i], tr.Dst.Descs[i], lo, hi)
			}
		}
	})
}
