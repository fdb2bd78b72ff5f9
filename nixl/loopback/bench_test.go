package loopback_test

import (
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// BenchmarkWrite64MiB moves 64 MiB as 1024 x 64 KiB descriptors with one
// WRITE on the Instant model, and, in the same iterations, copies 64 MiB
// between two Buffers with one copy(); it reports both rates and their
// ratio. In "contiguous" the descriptors follow each other on both sides
// (the agent merges them, as NIXL does); in "scattered" the target blocks
// are in reverse order, so every descriptor is its own 64 KiB copy.
func BenchmarkWrite64MiB(b *testing.B) {
	b.Run("contiguous", func(b *testing.B) { benchWrite64MiB(b, false) })
	b.Run("scattered", func(b *testing.B) { benchWrite64MiB(b, true) })
}

func benchWrite64MiB(b *testing.B, scattered bool) {
	const total, count = 64 << 20, 1024
	const size = total / count
	f, err := loopback.NewFabric(loopback.WithModel(loopback.Instant()))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	init, target := benchAgent(b, f, "prefill"), benchAgent(b, f, "decode")
	src, dst, plain := benchBuffer(b, total), benchBuffer(b, total), benchBuffer(b, total)
	if err := init.RegisterMem(regs(src), nil); err != nil {
		b.Fatal(err)
	}
	if err := target.RegisterMem(regs(dst), nil); err != nil {
		b.Fatal(err)
	}
	md, err := target.LocalMD()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := init.LoadRemoteMD(md); err != nil {
		b.Fatal(err)
	}
	local, remote := nixl.XferList{Mem: nixl.DRAM}, nixl.XferList{Mem: nixl.DRAM}
	for i := uint64(0); i < count; i++ {
		local.Descs = append(local.Descs, src.Desc(i*size, size))
		j := i
		if scattered {
			j = count - 1 - i
		}
		remote.Descs = append(remote.Descs, dst.Desc(j*size, size))
	}
	h, err := init.CreateXferReq(nixl.Write, local, remote, target.Name(), nil)
	if err != nil {
		b.Fatal(err)
	}
	// Touch every page once so neither side pays for first faults.
	copy(dst.Bytes(), src.Bytes())
	copy(plain.Bytes(), src.Bytes())

	var agentTime, copyTime time.Duration
	b.SetBytes(2 * total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if st, err := init.PostXferReq(h, nil); err != nil || st != nixl.StatusSuccess {
			b.Fatalf("PostXferReq: %v, %v", st, err)
		}
		t1 := time.Now()
		copy(plain.Bytes(), src.Bytes())
		t2 := time.Now()
		agentTime += t1.Sub(t0)
		copyTime += t2.Sub(t1)
	}
	b.StopTimer()
	gbps := func(d time.Duration) float64 { return float64(total) * float64(b.N) / d.Seconds() / 1e9 }
	b.ReportMetric(gbps(agentTime), "loopback-GB/s")
	b.ReportMetric(gbps(copyTime), "memcpy-GB/s")
	b.ReportMetric(copyTime.Seconds()/agentTime.Seconds(), "loopback/memcpy")
}

// BenchmarkSmallWriteWithNotif is the per-transfer overhead: one 4 KiB
// WRITE with a notification, and the target draining it.
func BenchmarkSmallWriteWithNotif(b *testing.B) {
	f, err := loopback.NewFabric()
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	init, target := benchAgent(b, f, "prefill"), benchAgent(b, f, "decode")
	src, dst := benchBuffer(b, 4096), benchBuffer(b, 4096)
	if err := init.RegisterMem(regs(src), nil); err != nil {
		b.Fatal(err)
	}
	if err := target.RegisterMem(regs(dst), nil); err != nil {
		b.Fatal(err)
	}
	md, _ := target.LocalMD()
	if _, err := init.LoadRemoteMD(md); err != nil {
		b.Fatal(err)
	}
	h, err := init.CreateXferReq(nixl.Write, list(src.Desc(0, 4096)), list(dst.Desc(0, 4096)), target.Name(), nixl.NotifOptions([]byte("req-1:1")))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := init.PostXferReq(h, nil); err != nil {
			b.Fatal(err)
		}
		n, err := target.GetNotifs(nil)
		if err != nil || n.Count() != 1 {
			b.Fatalf("GetNotifs: %v, %v", n, err)
		}
	}
}

func benchAgent(b *testing.B, f *loopback.Fabric, name string) *loopback.Agent {
	a, err := f.NewAgent(name)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func benchBuffer(b *testing.B, size int) *nixl.Buffer {
	buf, err := nixl.AllocBuffer(size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { buf.Free() })
	p := buf.Bytes()
	for i := range p {
		p[i] = byte(i)
	}
	return buf
}
