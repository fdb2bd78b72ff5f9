package staging

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// hostLayout allocates a DRAM layout (tp rank of tp, block size bs tokens)
// filled with random bytes.
func hostLayout(t *testing.T, tp, rank, bs, blocks int, rng *rand.Rand) (descriptors.Layout, *nixl.Buffer) {
	t.Helper()
	l := descriptors.Layout{Mem: nixl.DRAM, NumLayers: 2, NumBlocks: blocks, BlockSize: bs,
		KVHeads: 4 / tp, HeadBytes: 16, DType: "bfloat16", TPRank: rank, TPSize: tp}
	buf, err := nixl.AllocBuffer(int(uint64(l.NumRegions()) * l.RegionLen()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = buf.Free() })
	for i := range l.NumRegions() {
		l.Regions = append(l.Regions, descriptors.Region{Base: buf.Addr() + uint64(i)*l.RegionLen()})
	}
	b := buf.Bytes()
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return l, buf
}

func slotBuf(t *testing.T, n uint64) Slot {
	t.Helper()
	buf, err := nixl.AllocBuffer(int(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = buf.Free() })
	return Slot{Addr: buf.Addr(), Len: n}
}

// copyList copies a transfer's pairs (what the direct path moves).
func copyList(t *testing.T, tr descriptors.Transfer) {
	t.Helper()
	segs := make([]Seg, tr.Len())
	for i := range segs {
		segs[i] = Seg{Src: tr.Src.Descs[i].Addr, Dst: tr.Dst.Descs[i].Addr, Len: tr.Src.Descs[i].Len}
	}
	if err := (HostCopier{}).Copy(segs); err != nil {
		t.Fatal(err)
	}
}

func xferCopy(t *testing.T, from, to nixl.XferList) {
	t.Helper()
	if len(from.Descs) != len(to.Descs) {
		t.Fatalf("lists of %d and %d descriptors", len(from.Descs), len(to.Descs))
	}
	var segs []Seg
	for i := range from.Descs {
		if from.Descs[i].Len != to.Descs[i].Len {
			t.Fatalf("descriptor %d: %d vs %d bytes", i, from.Descs[i].Len, to.Descs[i].Len)
		}
		segs = append(segs, Seg{Src: from.Descs[i].Addr, Dst: to.Descs[i].Addr, Len: from.Descs[i].Len})
	}
	if err := (HostCopier{}).Copy(segs); err != nil {
		t.Fatal(err)
	}
}

// moved returns, for each destination byte the direct path writes, true.
func movedMask(t *testing.T, dst descriptors.Layout, buf *nixl.Buffer, trs []descriptors.Transfer) []bool {
	mask := make([]bool, buf.Len())
	for _, tr := range trs {
		for _, d := range tr.Dst.Descs {
			for i := d.Addr - buf.Addr(); i < d.Addr-buf.Addr()+d.Len; i++ {
				mask[i] = true
			}
		}
	}
	return mask
}

type geom struct{ srcTP, dstTP, srcBS, dstBS int }

var geoms = []geom{
	{1, 1, 16, 16}, {2, 1, 16, 16}, {1, 2, 16, 16}, {1, 1, 16, 32}, {1, 1, 32, 16}, {2, 1, 32, 16}, {1, 2, 16, 32}, {4, 2, 16, 32},
}

// requestBlocks returns random distinct blocks (fragmented) or a run.
func requestBlocks(rng *rand.Rand, n, numBlocks int, fragmented bool) []int {
	if !fragmented {
		start := rng.IntN(numBlocks - n + 1)
		out := make([]int, n)
		for i := range out {
			out[i] = start + i
		}
		return out
	}
	return rng.Perm(numBlocks)[:n]
}

// TestStagedEqualsDirect: for every geometry, fragmented or not, the push
// image (gather, one WRITE, scatter) and the pull image (gather, READ of
// runs or a span, scatter) leave every byte the direct path moves exactly
// as the direct path leaves it.
func TestStagedEqualsDirect(t *testing.T) {
	for _, g := range geoms {
		for _, frag := range []bool{false, true} {
			t.Run(fmt.Sprintf("tp%d->%d/bs%d->%d/frag=%v", g.srcTP, g.dstTP, g.srcBS, g.dstBS, frag), func(t *testing.T) {
				testStaged(t, g, frag)
			})
		}
	}
}

func testStaged(t *testing.T, g geom, frag bool) {
	rng := rand.New(rand.NewPCG(uint64(g.srcTP*1000+g.dstTP*100+g.srcBS), 7))
	const tokens = 150
	srcN := (tokens + g.srcBS - 1) / g.srcBS
	dstN := (tokens + g.dstBS - 1) / g.dstBS
	for d := range g.dstTP {
		var srcs []descriptors.Layout
		for s := range g.srcTP {
			l, _ := hostLayout(t, g.srcTP, s, g.srcBS, 24, rng)
			srcs = append(srcs, l)
		}
		direct, dbuf := hostLayout(t, g.dstTP, d, g.dstBS, 24, rng)
		pushed, pbuf := hostLayout(t, g.dstTP, d, g.dstBS, 24, rng)
		pulled, lbuf := hostLayout(t, g.dstTP, d, g.dstBS, 24, rng)
		srcBlocks := requestBlocks(rng, srcN, 24, frag)
		dstBlocks := requestBlocks(rng, dstN, 24, frag)
		ranks, err := descriptors.Sources(&srcs[0], &direct)
		if err != nil {
			t.Fatal(err)
		}
		var trs []descriptors.Transfer
		var pl Planner
		for _, s := range ranks {
			req := descriptors.Request{SrcBlocks: srcBlocks, DstBlocks: dstBlocks}
			tr, _, err := descriptors.MapCoalesced(&srcs[s], &direct, req)
			if err != nil {
				t.Fatal(err)
			}
			trs = append(trs, tr)
			copyList(t, tr)

			// Push: the image is the destination's.
			im, err := NewDstImage(&srcs[s], &pushed, len(dstBlocks))
			if err != nil {
				t.Fatal(err)
			}
			local, remote := slotBuf(t, im.Size()), slotBuf(t, im.Size())
			tp, _, _ := descriptors.MapCoalesced(&srcs[s], &pushed, req)
			wp, err := pl.PlanWrite(&tp, &srcs[s], &pushed, dstBlocks, im, local, remote.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if err := (HostCopier{}).Copy(wp.Gather); err != nil {
				t.Fatal(err)
			}
			if len(wp.Local.Descs) != 1 {
				t.Fatalf("staged WRITE has %d descriptors, want 1", len(wp.Local.Descs))
			}
			xferCopy(t, wp.Local, wp.Remote)
			if err := (HostCopier{}).Copy(im.Scatter(nil, &pushed, dstBlocks, remote.Addr)); err != nil {
				t.Fatal(err)
			}

			// Pull: the image is the source's whole blocks.
			simg := slotBuf(t, SrcImageSize(&srcs[s], len(srcBlocks)))
			if err := (HostCopier{}).Copy(SrcGather(nil, &srcs[s], srcBlocks, simg.Addr)); err != nil {
				t.Fatal(err)
			}
			tl, _, _ := descriptors.MapCoalesced(&srcs[s], &pulled, req)
			dslot := slotBuf(t, simg.Len)
			rp, err := pl.PlanRead(&tl, &srcs[s], &pulled, srcBlocks, simg.Addr, dslot)
			if err != nil {
				t.Fatal(err)
			}
			if len(rp.Local.Descs) > MaxRuns {
				t.Fatalf("staged READ has %d descriptors, more than MaxRuns", len(rp.Local.Descs))
			}
			xferCopy(t, rp.Remote, rp.Local)
			if err := (HostCopier{}).Copy(rp.Scatter); err != nil {
				t.Fatal(err)
			}
		}
		// The block-id paths, where whole blocks map one to one.
		if staging := SameBlocks(&srcs[0], &direct); staging && len(ranks) == 1 {
			blocked, bbuf := hostLayout(t, g.dstTP, d, g.dstBS, 24, rng)
			pulledB, qbuf := hostLayout(t, g.dstTP, d, g.dstBS, 24, rng)
			s := ranks[0]
			im, _ := NewDstImage(&srcs[s], &blocked, len(dstBlocks))
			local, remote := slotBuf(t, im.Size()), slotBuf(t, im.Size())
			bc, err := DstImageGather(&srcs[s], srcBlocks, 0, len(dstBlocks), local.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if err := (HostCopier{}).CopyBlocks(bc); err != nil {
				t.Fatal(err)
			}
			xferCopy(t, nixlList(&srcs[s], local.Addr, im.Size()), nixlList(&blocked, remote.Addr, im.Size()))
			if err := (HostCopier{}).CopyBlocks(im.ScatterBlocks(&blocked, dstBlocks, remote.Addr)); err != nil {
				t.Fatal(err)
			}
			simg := slotBuf(t, SrcImageSize(&srcs[s], len(srcBlocks)))
			if err := (HostCopier{}).CopyBlocks(SrcGatherBlocks(&srcs[s], srcBlocks, simg.Addr)); err != nil {
				t.Fatal(err)
			}
			dslot := slotBuf(t, simg.Len)
			rp, sc, err := SameBlocksRead(&srcs[s], &pulledB, len(srcBlocks), 0, dstBlocks, simg.Addr, dslot)
			if err != nil {
				t.Fatal(err)
			}
			xferCopy(t, rp.Remote, rp.Local)
			if err := (HostCopier{}).CopyBlocks(sc); err != nil {
				t.Fatal(err)
			}
			mask := movedMask(t, direct, dbuf, trs)
			for i, m := range mask {
				if m && (bbuf.Bytes()[i] != dbuf.Bytes()[i] || qbuf.Bytes()[i] != dbuf.Bytes()[i]) {
					t.Fatalf("block path: byte %d push %#x pull %#x, direct %#x", i, bbuf.Bytes()[i], qbuf.Bytes()[i], dbuf.Bytes()[i])
				}
			}
		}
		mask := movedMask(t, direct, dbuf, trs)
		want, gotPush, gotPull := dbuf.Bytes(), pbuf.Bytes(), lbuf.Bytes()
		n := 0
		for i, m := range mask {
			if !m {
				continue
			}
			n++
			if gotPush[i] != want[i] {
				t.Fatalf("dst rank %d: push byte %d is %#x, direct gave %#x", d, i, gotPush[i], want[i])
			}
			if gotPull[i] != want[i] {
				t.Fatalf("dst rank %d: pull byte %d is %#x, direct gave %#x", d, i, gotPull[i], want[i])
			}
		}
		if n == 0 {
			t.Fatal("nothing moved")
		}
	}
}

func TestPoolNeverHandsOutTwice(t *testing.T) {
	p := NewPool(0x1000, 64, 2)
	a, ok1 := p.Acquire("a")
	b, ok2 := p.Acquire("b")
	_, ok3 := p.Acquire("c")
	if !ok1 || !ok2 || ok3 || a.Index == b.Index || p.InUse() != 2 {
		t.Fatalf("acquire: %v %v %v, slots %d %d, in use %d", ok1, ok2, ok3, a.Index, b.Index, p.InUse())
	}
	if a.Addr != 0x1000 || b.Addr != 0x1040 || a.Len != 64 {
		t.Fatalf("slots at %#x, %#x of %d", a.Addr, b.Addr, a.Len)
	}
	if err := p.Release(a); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(a); err == nil {
		t.Fatal("second release accepted")
	}
	c, ok := p.Acquire("c")
	if !ok || c.Index != a.Index || p.InUse() != 2 {
		t.Fatalf("reacquire: %v slot %d in use %d", ok, c.Index, p.InUse())
	}
}

func TestModelChooses(t *testing.T) {
	m := Model{Mode: ModeAuto, DescCost: 6000, CopyBandwidth: 2e12}
	// 131072 fragments of 32 KiB: direct 0.79 s, staged 4.3 ms.
	if got := m.Choose(131072, 4<<30, 1); got != Staged {
		t.Fatalf("fragmented 4 GiB: %v", got)
	}
	// 128 descriptors (contiguous): direct 0.77 ms, staged 4.3 ms.
	if got := m.Choose(128, 4<<30, 1); got != Direct {
		t.Fatalf("contiguous 4 GiB: %v", got)
	}
	if got := (Model{Mode: ModeOn}).Choose(1, 1, 1); got != Staged {
		t.Fatalf("ModeOn: %v", got)
	}
	if got := (Model{}).Choose(1<<20, 1, 1); got != Direct {
		t.Fatalf("ModeOff: %v", got)
	}
}

func TestHostCopierRefusesForeignMemory(t *testing.T) {
	s := slotBuf(t, 64)
	err := (HostCopier{}).Copy([]Seg{{Src: s.Addr, Dst: 0x10, Len: 8}})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("destination 0x10+8")) {
		t.Fatalf("err = %v", err)
	}
}

func TestInfoSlot(t *testing.T) {
	in := (&Config{Mode: ModeOn, Base: 0x1000, SlotBytes: 256, Slots: 2}).Info()
	if a, err := in.Slot(1); err != nil || a != 0x1100 {
		t.Fatalf("slot 1: %#x %v", a, err)
	}
	for _, i := range []int{-1, 2} {
		if _, err := in.Slot(i); err == nil {
			t.Fatalf("slot %d accepted", i)
		}
	}
	if _, err := (Info{}).Slot(0); err == nil {
		t.Fatal("slot of no staging accepted")
	}
}

func TestSplitLists(t *testing.T) {
	l := nixl.XferList{Mem: nixl.VRAM, Descs: []nixl.Desc{{Addr: 0x1000, Len: 10, DevID: 1}}}
	r := nixl.XferList{Mem: nixl.VRAM, Descs: []nixl.Desc{{Addr: 0x9000, Len: 10, DevID: 2}}}
	gl, gr := SplitLists(l, r, 4)
	want := []uint64{4, 4, 2}
	if len(gl.Descs) != 3 || len(gr.Descs) != 3 {
		t.Fatalf("%d and %d descriptors", len(gl.Descs), len(gr.Descs))
	}
	for i, n := range want {
		if gl.Descs[i].Len != n || gr.Descs[i].Len != n || gl.Descs[i].Addr != 0x1000+uint64(4*i) || gr.Descs[i].Addr != 0x9000+uint64(4*i) || gl.Descs[i].DevID != 1 || gr.Descs[i].DevID != 2 {
			t.Fatalf("piece %d: %+v %+v", i, gl.Descs[i], gr.Descs[i])
		}
	}
	if a, b := SplitLists(l, r, 0); len(a.Descs) != 1 || len(b.Descs) != 1 {
		t.Fatal("chunk 0 changed the lists")
	}
}

func TestMeasureCopy(t *testing.T) {
	s := slotBuf(t, 1<<20)
	bw, err := MeasureCopy(&Config{Mode: ModeAuto, Base: s.Addr, SlotBytes: s.Len, Slots: 1, Copier: HostCopier{}})
	if err != nil || bw <= 0 {
		t.Fatalf("bandwidth %v, %v", bw, err)
	}
	if _, err := MeasureCopy(&Config{Base: s.Addr, SlotBytes: 16, Copier: HostCopier{}}); err == nil {
		t.Fatal("measured in a 16-byte slot")
	}
}
