//go:build cuda

package cudamem

import (
	"bytes"
	"testing"
	"time"
)

func openOrSkip(tb testing.TB, ord int) *Device {
	tb.Helper()
	n, err := Count()
	if err != nil || n <= ord {
		tb.Skipf("no CUDA device %d: %v (count %d)", ord, err, n)
	}
	d, err := Open(ord)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}

func TestRoundTrip(t *testing.T) {
	d := openOrSkip(t, 0)
	const n = 1 << 20
	a, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(a)
	b, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(b)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	if err := d.CopyHtoD(a, src); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(b, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoD(b, a, n); err != nil {
		t.Fatal(err)
	}
	// Two async memsets of the first and last 4 KiB, one wait: the
	// copy back must see both.
	if err := d.MemsetAsync(b, 0xAB, 4096); err != nil {
		t.Fatal(err)
	}
	if err := d.MemsetAsync(b+n-4096, 0xCD, 4096); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range 4096 {
		src[i], src[n-4096+i] = 0xAB, 0xCD
	}
	got := make([]byte, n)
	if err := d.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("bytes differ after HtoD, DtoD, DtoH")
	}
}

func TestFreeTwiceIsAnError(t *testing.T) {
	d := openOrSkip(t, 0)
	p, err := d.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := d.Free(p); err == nil {
		t.Fatal("second Free of the same pointer returned nil")
	}
}

// BenchmarkMemcpyDtoD is the yardstick the GPU transfer benchmarks report
// their ratio against: 1 GiB device-to-device on one GPU.
func BenchmarkMemcpyDtoD(b *testing.B) {
	d := openOrSkip(b, 0)
	const n = 1 << 30
	src, err := d.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(src)
	dst, err := d.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(dst)
	b.SetBytes(n)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := d.CopyDtoD(dst, src, n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/time.Since(start).Seconds()/1e9, "GB/s")
}

// BenchmarkMemcpyPeer is the yardstick of the two-GPU benchmarks: 1 GiB
// from device 0 to device 1 with cuMemcpyPeer, peer access enabled both ways.
func BenchmarkMemcpyPeer(b *testing.B) {
	d0 := openOrSkip(b, 0)
	d1 := openOrSkip(b, 1)
	if ok, err := CanAccessPeer(0, 1); err != nil || !ok {
		b.Logf("device 0 cannot access device 1 directly (%v): the copy is staged", err)
	} else {
		if err := d0.EnablePeerAccess(d1); err != nil {
			b.Fatal(err)
		}
		if err := d1.EnablePeerAccess(d0); err != nil {
			b.Fatal(err)
		}
	}
	const n = 1 << 30
	src, err := d0.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer d0.Free(src)
	dst, err := d1.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer d1.Free(dst)
	b.SetBytes(n)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := CopyPeer(dst, d1, src, d0, n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/time.Since(start).Seconds()/1e9, "GB/s")
}

func TestPeerCopy(t *testing.T) {
	d0 := openOrSkip(t, 0)
	d1 := openOrSkip(t, 1)
	if ok, err := CanAccessPeer(0, 1); err == nil && ok {
		if err := d0.EnablePeerAccess(d1); err != nil {
			t.Fatal(err)
		}
		if err := d0.EnablePeerAccess(d1); err != nil {
			t.Fatalf("enabling peer access twice: %v", err)
		}
	}
	const n = 1 << 20
	src, err := d0.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d0.Free(src)
	dst, err := d1.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Free(dst)
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*13 + 1)
	}
	if err := d0.CopyHtoD(src, want); err != nil {
		t.Fatal(err)
	}
	if err := d1.Memset(dst, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := CopyPeer(dst, d1, src, d0, n); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := d1.CopyDtoH(got, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes differ after cuMemcpyPeer from device 0 to device 1")
	}
}
