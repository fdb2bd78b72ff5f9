package descriptors

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/gonixl/gonixl/nixl"
)

// fuzzLayout builds a layout from fuzzed small integers, valid or not: the
// fields are raw (negative, zero, odd), only the region count is kept near
// what the layer count asks so that the harness itself stays small.
func fuzzLayout(mla bool, layers, blocks, blockTokens, heads, model, headBytes, rank, tp int8, regionDelta int8, base uint64) *Layout {
	l := &Layout{Mem: nixl.MemType(int(rank) % 6), NumLayers: int(layers), NumBlocks: int(blocks), BlockSize: int(blockTokens),
		KVHeads: int(heads), ModelKVHeads: int(model), HeadBytes: int(headBytes), DType: "bfloat16", MLA: mla,
		TPRank: int(rank), TPSize: int(tp)}
	if l.Mem < 0 {
		l.Mem = -l.Mem
	}
	n := max(0, min(l.NumRegions(), 64)+int(regionDelta%2))
	for i := 0; i < n; i++ {
		l.Regions = append(l.Regions, Region{Base: base + uint64(i)*(1<<20)*uint64(uint8(blocks)+1), DevID: uint64(i % 2)})
	}
	return l
}

func fuzzIDs(b []byte) []int {
	ids := make([]int, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		ids = append(ids, int(int16(binary.LittleEndian.Uint16(b[i:]))))
	}
	return ids
}

// FuzzMap feeds arbitrary layouts and block lists to the mapping entry
// points: they must return an error or lists that satisfy the invariants,
// never panic.
func FuzzMap(f *testing.F) {
	f.Add(false, int8(2), int8(8), int8(16), int8(2), int8(0), int8(8), int8(0), int8(1), int8(0), uint64(4096),
		int8(8), int8(16), int8(1), int8(0), int8(8), int8(1), int8(2), int8(0), uint64(1<<30),
		[]byte{1, 0, 2, 0, 3, 0}, []byte{4, 0, 5, 0, 6, 0}, int8(0))
	f.Add(true, int8(1), int8(4), int8(4), int8(1), int8(0), int8(16), int8(1), int8(2), int8(0), uint64(0),
		int8(4), int8(2), int8(1), int8(0), int8(16), int8(3), int8(4), int8(0), uint64(0),
		[]byte{0, 0, 1, 0}, []byte{2, 0, 3, 0, 0, 0, 1, 0}, int8(0))
	f.Add(false, int8(1), int8(4), int8(2), int8(1), int8(8), int8(2), int8(5), int8(16), int8(0), uint64(^uint64(0)-10),
		int8(4), int8(6), int8(3), int8(8), int8(2), int8(0), int8(1), int8(1), uint64(0),
		[]byte{0xff, 0xff, 1, 0}, []byte{2, 0, 2, 0}, int8(-1))
	f.Fuzz(func(t *testing.T, mla bool, sl, sb, st, sh, sm, shb, sr, stp, sd int8, sbase uint64,
		db, dt, dh, dm, dhb, dr, dtp, dd int8, dbase uint64, srcIDs, dstIDs []byte, cached int8) {
		src := fuzzLayout(mla, sl, sb, st, sh, sm, shb, sr, stp, sd, sbase)
		dst := fuzzLayout(mla, sl, db, dt, dh, dm, dhb, dr, dtp, dd, dbase)
		req := Request{SrcBlocks: fuzzIDs(srcIDs), DstBlocks: fuzzIDs(dstIDs), DstCached: int(cached)}

		_, _ = Sources(src, dst)
		_, _ = Targets(src, dst)
		_ = src.Validate()
		plain, err := MapRequest(src, dst, req)
		merged, st2, err2 := MapCoalesced(src, dst, req)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("MapRequest error %v, MapCoalesced error %v", err, err2)
		}
		if err != nil {
			if err.Error() != err2.Error() {
				t.Fatalf("errors differ: %v / %v", err, err2)
			}
			return
		}
		c, st1 := Coalesce(plain)
		if !reflect.DeepEqual(c, merged) || st1 != st2 {
			t.Fatalf("Coalesce(MapRequest) differs from MapCoalesced: %v vs %v", st1, st2)
		}
		for _, tr := range []Transfer{plain, merged} {
			if len(tr.Src.Descs) != len(tr.Dst.Descs) {
				t.Fatalf("lengths %d, %d", len(tr.Src.Descs), len(tr.Dst.Descs))
			}
			var sum uint64
			for i := range tr.Src.Descs {
				s, d := tr.Src.Descs[i], tr.Dst.Descs[i]
				if s.Len != d.Len || s.Len == 0 {
					t.Fatalf("pair %d lengths %d, %d", i, s.Len, d.Len)
				}
				if regionOf(src, s) < 0 || regionOf(dst, d) < 0 {
					t.Fatalf("pair %d outside the regions: %+v %+v", i, s, d)
				}
				sum += s.Len
			}
			if sum != tr.Bytes {
				t.Fatalf("Bytes %d, sum %d", tr.Bytes, sum)
			}
		}
	})
}
