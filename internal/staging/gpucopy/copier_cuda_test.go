//go:build cuda

package gpucopy

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gonixl/gonixl/internal/cuda"
	"github.com/gonixl/gonixl/internal/staging"
)

// newOrSkip makes a copier on device 0, or skips where there is no driver
// or no device, and gives its context for the test's own memory.
func newOrSkip(t *testing.T) (*Copier, *cuda.Context) {
	t.Helper()
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device: %v (count %d)", err, n)
	}
	c, err := New(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, err := cuda.RetainPrimary(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Release() })
	return c, ctx
}

// devBuf is device memory holding want, freed when the test ends.
func devBuf(t *testing.T, ctx *cuda.Context, want []byte) uint64 {
	t.Helper()
	var p uint64
	err := ctx.Do(func() (err error) {
		if p, err = cuda.MemAlloc(uint64(len(want))); err != nil {
			return err
		}
		return cuda.MemcpyHtoD(p, want)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Do(func() error { return cuda.MemFree(p) }) })
	return p
}

func readBack(t *testing.T, ctx *cuda.Context, p uint64, n int) []byte {
	t.Helper()
	got := make([]byte, n)
	if err := ctx.Do(func() error { return cuda.MemcpyDtoH(got, p) }); err != nil {
		t.Fatal(err)
	}
	return got
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func TestCopySegments(t *testing.T) {
	c, ctx := newOrSkip(t)
	const n = 4 << 20
	src := pattern(n, 1)
	s := devBuf(t, ctx, src)
	d := devBuf(t, ctx, make([]byte, n))
	// A long segment (cut into pieces), a short odd one, one unaligned.
	segs := []staging.Seg{
		{Src: s, Dst: d + 1<<20, Len: 1 << 20},
		{Src: s + 3<<20, Dst: d, Len: 12345},
		{Src: s + 7, Dst: d + 3<<20 + 3, Len: 100001},
	}
	want := make([]byte, n)
	for _, g := range segs {
		copy(want[g.Dst-d:g.Dst-d+g.Len], src[g.Src-s:g.Src-s+g.Len])
	}
	for _, progress := range []func(){nil, func() {}} {
		if err := ctx.Do(func() error { return cuda.MemsetD8(d, 0, n) }); err != nil {
			t.Fatal(err)
		}
		if err := ctx.Do(cuda.CtxSynchronize); err != nil {
			t.Fatal(err)
		}
		if err := c.CopyProgress(segs, progress); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(readBack(t, ctx, d, n), want) {
			t.Fatalf("segments copied wrong (progress %v)", progress != nil)
		}
	}
}

func TestCopyBlocks(t *testing.T) {
	c, ctx := newOrSkip(t)
	if !c.HasBlockKernel() {
		t.Fatal("the embedded PTX has no block kernel")
	}
	const blockLen, blocks, regions = 4096, 64, 3
	var bases []uint64
	var srcs [][]byte
	for r := range regions {
		b := pattern(blockLen*blocks, byte(r+1))
		srcs = append(srcs, b)
		bases = append(bases, devBuf(t, ctx, b))
	}
	ids := []int{5, 0, 63, 17, 18, 2}
	const off, ln = 512, 1024
	slotLen := regions * len(ids) * ln
	slot := devBuf(t, ctx, make([]byte, slotLen))
	bc := staging.BlockCopy{Bases: bases, Blocks: ids, BlockLen: blockLen, Off: off, Len: ln,
		Slot: slot, SlotStride: uint64(len(ids) * ln), ToSlot: true}
	want := make([]byte, slotLen)
	for r := range regions {
		for j, id := range ids {
			copy(want[(r*len(ids)+j)*ln:], srcs[r][id*blockLen+off:id*blockLen+off+ln])
		}
	}
	if err := c.CopyBlocksProgress(bc, func() {}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readBack(t, ctx, slot, slotLen), want) {
		t.Fatal("gather by block ids copied wrong")
	}
	// Scatter the slot back into fresh blocks of region 0.
	dst := devBuf(t, ctx, make([]byte, blockLen*blocks))
	bc.Bases, bc.ToSlot, bc.SlotStride = []uint64{dst}, false, 0
	if err := c.CopyBlocks(bc); err != nil {
		t.Fatal(err)
	}
	got := readBack(t, ctx, dst, blockLen*blocks)
	for j, id := range ids {
		if !bytes.Equal(got[id*blockLen+off:id*blockLen+off+ln], want[j*ln:(j+1)*ln]) {
			t.Fatalf("scatter of block %d copied wrong", id)
		}
	}
}

func TestCloseTwiceThenCopy(t *testing.T) {
	c, _ := newOrSkip(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Copy([]staging.Seg{{Len: 1}}); err == nil {
		t.Fatal("Copy after Close returned nil")
	}
}

func TestBadPTX(t *testing.T) {
	newOrSkip(t)
	_, err := NewWithPTX(0, "not ptx")
	var e *cuda.Error
	if !errors.As(err, &e) {
		t.Fatalf("NewWithPTX of garbage: %v", err)
	}
	t.Logf("NewWithPTX of garbage: %v", err)
}
