package descriptors

import (
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/nixl"
)

// hybridLayout is a small valid grouped layout: full attention and an SSM
// group sharing region 0, plus a sliding-window group, NHD.
func hybridLayout() *Layout {
	return &Layout{Mem: nixl.VRAM, NumLayers: 3, NumBlocks: 8, BlockSize: 4, KVHeads: 2, HeadBytes: 8, DType: "bfloat16",
		KVPacked: true, TPSize: 1, Order: OrderNHD,
		Regions: []Region{{Base: 0x1000}, {Base: 0x2000}, {Base: 0x3000}},
		Groups: []Group{
			{Kind: KindFull, Regions: []int{0}, PhysicalPerLogical: 2},
			{Kind: KindSlidingWindow, Regions: []int{1}, Window: 16, PhysicalPerLogical: 2},
			{Kind: KindSSM, Regions: []int{0, 2}, PhysicalPerLogical: 2, SSM: &SSMState{Conv: []int{24, 8, 8}, State: 64, Page: 128}},
		}}
}

// FuzzLayoutDecode decodes arbitrary bytes as a peer's Layout, as the
// handshake does, and validates it: decoding and validation must fail with
// an error or give a layout that re-encodes to one decoding the same, whose
// lists can be built, never panic or allocate beyond the input's bounds.
func FuzzLayoutDecode(f *testing.F) {
	for _, v := range wireVectors {
		b, _ := hex.DecodeString(v.hex)
		f.Add(b)
	}
	b, err := msgpack.Marshal(hybridLayout())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x81, 0xa6, 'g', 'r', 'o', 'u', 'p', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
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
		again, err := msgpack.Marshal(&l)
		if err != nil {
			t.Fatal(err)
		}
		var l2 Layout
		if err := msgpack.Unmarshal(again, &l2); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(l, l2) {
			t.Fatalf("round trip changed the layout:\n%+v\n%+v", l, l2)
		}
		reg := l.RegList()
		if len(reg.Descs) != len(l.Regions) {
			t.Fatalf("RegList has %d descriptors for %d regions", len(reg.Descs), len(l.Regions))
		}
		for i, d := range reg.Descs {
			if d.Len != l.RegionLenOf(i) || d.Len == 0 {
				t.Fatalf("region %d registered with %d bytes, RegionLenOf %d", i, d.Len, l.RegionLenOf(i))
			}
		}
		if len(l.Regions)*l.NumBlocks <= 1<<12 {
			if n := len(l.BlockDescs().Descs); n != len(l.Regions)*l.NumBlocks {
				t.Fatalf("BlockDescs has %d descriptors, want %d", n, len(l.Regions)*l.NumBlocks)
			}
		}
		for _, g := range l.GroupList() {
			_ = g.physBlockLen(&l)
		}
	})
}

// FuzzMapGroups maps random grouped requests (a random valid scenario per
// seed, as the property test draws them) and checks every byte; with
// corrupt set, it damages the request or a layout first, and then the
// mapping must fail with a classified error or still give lists that stay
// inside the registrations, never panic.
func FuzzMapGroups(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(0), uint16(0))
	f.Add(uint64(7), uint64(24), uint8(3), uint16(9))
	f.Add(uint64(24), uint64(2026), uint8(8), uint16(65535))
	f.Fuzz(func(t *testing.T, a, b uint64, corrupt uint8, v uint16) {
		rng := rand.New(rand.NewPCG(a, b))
		sc := randomGroupScenario(rng)
		if corrupt == 0 {
			if err := checkGroupScenario(sc, &Transfer{}); err != nil {
				t.Fatalf("%v\n%v", err, sc)
			}
			return
		}
		src, dst := sc.src[int(v)%len(sc.src)], sc.dst[int(v/7)%len(sc.dst)]
		req := sc.req
		gi := int(v) % len(req.Src)
		x := int(int16(v))
		switch corrupt % 9 {
		case 1:
			req.Tokens = x
		case 2:
			req.Src[gi] = append(req.Src[gi], x)
		case 3:
			req.Dst[gi] = append(req.Dst[gi], x)
		case 4:
			req.Dst = req.Dst[:gi]
		case 5:
			if len(req.Dst[gi]) > 0 {
				req.Dst[gi] = append(req.Dst[gi], req.Dst[gi][0])
			}
		case 6:
			g := &dst.Groups[gi]
			g.Window = x
		case 7:
			g := &src.Groups[gi]
			g.PhysicalPerLogical = x
		case 8:
			g := &dst.Groups[gi]
			g.Regions = append(g.Regions, x)
		default:
			src.Order = string(rune('A' + int(v)%26))
		}
		tr, st, err := MapGroups(src, dst, req)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrIncompatible) {
				t.Fatalf("error %v matches neither sentinel", err)
			}
			return
		}
		if st.After != tr.Len() || len(tr.Src.Descs) != len(tr.Dst.Descs) {
			t.Fatalf("stats %+v for %d/%d pairs", st, len(tr.Src.Descs), len(tr.Dst.Descs))
		}
		var sum uint64
		for i := range tr.Src.Descs {
			s, d := tr.Src.Descs[i], tr.Dst.Descs[i]
			if s.Len != d.Len || s.Len == 0 || groupRegionOf(src, s) < 0 || groupRegionOf(dst, d) < 0 {
				t.Fatalf("pair %d %+v -> %+v is empty, uneven or outside the regions", i, s, d)
			}
			sum += s.Len
		}
		if sum != tr.Bytes {
			t.Fatalf("Bytes %d, sum %d", tr.Bytes, sum)
		}
	})
}

// groupRegionOf returns the region holding all of d, or -1.
func groupRegionOf(l *Layout, d nixl.Desc) int {
	for r, reg := range l.Regions {
		n := l.RegionLenOf(r)
		if reg.DevID == d.DevID && d.Addr >= reg.Base && d.Addr-reg.Base <= n && d.Len <= n-(d.Addr-reg.Base) {
			return r
		}
	}
	return -1
}
