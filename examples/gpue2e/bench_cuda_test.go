//go:build nixl && cuda

package gpue2e

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/cudamem"
	"github.com/gonixl/gonixl/nixl"
)

// geometry is the KV cache of the benchmarks: a Qwen3-32B-like model (64
// layers with K and V, 8 KV heads of 128 bf16 values, 16-token blocks, so
// 32 KiB per block per region) and a 16k-token request (1024 blocks). On
// host memory (GONIXL_E2E_MEM=dram, a harness check) everything shrinks.
type geometry struct {
	layers, blocks, reqBlocks int
	big                       uint64 // one descriptor
	manyN                     int    // many descriptors of manyLen
	manyLen                   uint64
}

func benchGeometry() geometry {
	if useDRAM() {
		return geometry{layers: 2, blocks: 64, reqBlocks: 32, big: 16 << 20, manyN: 256, manyLen: 64 << 10}
	}
	return geometry{layers: 64, blocks: 2048, reqBlocks: 1024, big: 1 << 30, manyN: 1024, manyLen: 1 << 20}
}

// kvLayout is one TP rank's KV cache at base: 2*layers regions back to back.
func kvLayout(m memory, base uint64, layers, blocks int) descriptors.Layout {
	l := descriptors.Layout{
		Mem: m.mem(), NumLayers: layers, NumBlocks: blocks, BlockSize: 16,
		KVHeads: 8, HeadBytes: 128 * 2, DType: "bfloat16", TPRank: 0, TPSize: 1,
	}
	for i := range l.NumRegions() {
		l.Regions = append(l.Regions, descriptors.Region{Base: base + uint64(i)*l.RegionLen(), DevID: m.devID()})
	}
	return l
}

func kvBytes(layers, blocks int) uint64 {
	l := descriptors.Layout{NumLayers: layers, NumBlocks: blocks, BlockSize: 16, KVHeads: 8, HeadBytes: 256}
	return uint64(2*layers) * l.RegionLen()
}

var (
	benchPairsMu sync.Mutex
	benchPairs   = map[int]*pair{}
	yardsticks   = map[int]float64{}
	verified     = map[string]bool{}
)

// benchPair returns the two-process pair with its target on device dev,
// shared by every benchmark and closed after them.
func benchPair(b *testing.B, dev int) *pair {
	benchPairsMu.Lock()
	defer benchPairsMu.Unlock()
	if p := benchPairs[dev]; p != nil {
		return p
	}
	g := benchGeometry()
	p, err := newPair(nil, false, dev, max(kvBytes(g.layers, g.blocks), g.big, uint64(g.manyN)*g.manyLen))
	if err != nil {
		b.Fatal(err)
	}
	benchPairs[dev] = p
	afterTests = append(afterTests, func() {
		if err := p.close(); err != nil {
			fmt.Printf("closing the benchmark pair on device %d: %v\n", dev, err)
		}
	})
	return p
}

// yardstick returns the GB/s of the platform's own copy of g.big bytes from
// device 0 to device dev, measured once per run: cuMemcpyDtoD on one GPU,
// cuMemcpyPeer with peer access between two.
func yardstick(b *testing.B, dev int) float64 {
	benchPairsMu.Lock()
	defer benchPairsMu.Unlock()
	if y, ok := yardsticks[dev]; ok {
		return y
	}
	n := benchGeometry().big
	m0, err := openMemory(0)
	if err != nil {
		b.Fatal(err)
	}
	defer m0.close()
	src, err := m0.alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer m0.free(src)
	var copyOnce func() error
	if dev == 0 {
		dst, err := m0.alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		defer m0.free(dst)
		copyOnce = func() error { return m0.copy(dst, src, n) }
	} else {
		m1, err := openMemory(dev)
		if err != nil {
			b.Fatal(err)
		}
		defer m1.close()
		dst, err := m1.alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		defer m1.free(dst)
		copyOnce = func() error { return m1.copy(dst, src, n) }
		if g0, ok := m0.(*gpuMem); ok {
			g1 := m1.(*gpuMem)
			if err := g0.d.EnablePeerAccess(g1.d); err != nil {
				b.Fatal(err)
			}
			if err := g1.d.EnablePeerAccess(g0.d); err != nil {
				b.Fatal(err)
			}
			copyOnce = func() error { return cudamem.CopyPeer(dst, g1.d, src, g0.d, n) }
		}
	}
	if err := copyOnce(); err != nil {
		b.Fatal(err)
	}
	const reps = 10
	start := time.Now()
	for range reps {
		if err := copyOnce(); err != nil {
			b.Fatal(err)
		}
	}
	y := float64(n) * reps / time.Since(start).Seconds() / 1e9
	b.Logf("yardstick: copy of %d bytes from device 0 to device %d: %.1f GB/s", n, dev, y)
	yardsticks[dev] = y
	return y
}

// benchDevices are the target devices of the benchmarks: GPU 0, and GPU 1
// when there is one.
func benchDevices() []int {
	if deviceCount() >= 2 {
		return []int{0, 1}
	}
	return []int{0}
}

// benchXfer runs one benchmark of a transfer: the first time its name is
// seen, one verified transfer (every destination byte checked); then b.N
// transfers, each created, posted, waited for and released, as a connector
// does per request. It reports GB/s, the ratio to the platform copy
// (x_memcpy) and the descriptor count.
func benchXfer(b *testing.B, p *pair, dev int, op nixl.XferOp, local, remote nixl.XferList, check bool) {
	y := yardstick(b, dev)
	if check {
		benchPairsMu.Lock()
		done := verified[b.Name()]
		verified[b.Name()] = true
		benchPairsMu.Unlock()
		if !done {
			if err := p.verifiedXfer(op, local, remote, nil, 7); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := p.xfer(op, local, remote, nil); err != nil { // warm: connection, registration caches
		b.Fatal(err)
	}
	total := local.TotalBytes()
	b.SetBytes(int64(total))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := p.xfer(op, local, remote, nil); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	gbs := float64(total) * float64(b.N) / el.Seconds() / 1e9
	b.ReportMetric(gbs, "GB/s")
	b.ReportMetric(gbs/y, "x_memcpy")
	b.ReportMetric(float64(len(local.Descs)), "descs")
}

// BenchmarkVRAM moves g.big bytes as one descriptor and as many 1 MiB
// descriptors, WRITE and READ, between two processes: on GPU 0 and, when
// present, from GPU 0 to GPU 1.
func BenchmarkVRAM(b *testing.B) {
	needDevices(b, 1)
	g := benchGeometry()
	for _, dev := range benchDevices() {
		for _, op := range []nixl.XferOp{nixl.Write, nixl.Read} {
			for _, shape := range []struct {
				n   int
				len uint64
			}{{1, g.big}, {g.manyN, g.manyLen}} {
				name := fmt.Sprintf("gpu0-gpu%d/%s/%dx%dKiB", dev, op, shape.n, shape.len>>10)
				b.Run(name, func(b *testing.B) {
					p := benchPair(b, dev)
					local := nixl.XferList{Mem: p.init.m.mem()}
					remote := nixl.XferList{Mem: p.init.m.mem()}
					for i := range shape.n {
						local.Descs = append(local.Descs, p.init.desc(uint64(i)*shape.len, shape.len))
						remote.Descs = append(remote.Descs, p.remoteDesc(uint64(i)*shape.len, shape.len))
					}
					benchXfer(b, p, dev, op, local, remote, true)
				})
			}
		}
	}
}

// kvRequest returns a request's block ids on both sides: contiguous (source
// blocks 0..n-1, destination blocks from n) or fragmented (random distinct
// blocks anywhere in the cache, on each side its own).
func kvRequest(g geometry, fragmented bool) (src, dst []int) {
	if !fragmented {
		for i := range g.reqBlocks {
			src = append(src, i)
			dst = append(dst, (g.blocks-g.reqBlocks+i)%g.blocks)
		}
		return src, dst
	}
	r := rand.New(rand.NewPCG(1, 2))
	return r.Perm(g.blocks)[:g.reqBlocks], r.Perm(g.blocks)[:g.reqBlocks]
}

// BenchmarkKV moves a 16k-token request of a Qwen3-32B-like KV cache
// between two processes (WRITE as push does, READ as pull does), with
// contiguous and fragmented blocks, with the descriptors as
// descriptors.Map gives them (one per block per region) and as
// descriptors.MapCoalesced gives them.
func BenchmarkKV(b *testing.B) {
	needDevices(b, 1)
	g := benchGeometry()
	for _, dev := range benchDevices() {
		for _, op := range []nixl.XferOp{nixl.Write, nixl.Read} {
			for _, frag := range []bool{false, true} {
				for _, coalesce := range []bool{false, true} {
					name := fmt.Sprintf("gpu0-gpu%d/%s/%s/%s", dev, op, map[bool]string{false: "contiguous", true: "fragmented"}[frag], map[bool]string{false: "per-block", true: "coalesced"}[coalesce])
					b.Run(name, func(b *testing.B) {
						p := benchPair(b, dev)
						tbase, _, _ := p.tgt.buf()
						initL := kvLayout(p.init.m, p.init.base, g.layers, g.blocks)
						tgtL := kvLayout(p.init.m, tbase, g.layers, g.blocks)
						tgtL.Regions = nil
						for i := range initL.NumRegions() {
							tgtL.Regions = append(tgtL.Regions, descriptors.Region{Base: tbase + uint64(i)*initL.RegionLen(), DevID: p.remoteDesc(0, 0).DevID})
						}
						srcL, dstL := &initL, &tgtL
						if op == nixl.Read {
							srcL, dstL = &tgtL, &initL
						}
						srcB, dstB := kvRequest(g, frag)
						var t descriptors.Transfer
						var err error
						if coalesce {
							t, _, err = descriptors.MapCoalesced(srcL, dstL, descriptors.Request{SrcBlocks: srcB, DstBlocks: dstB})
						} else {
							t, err = descriptors.Map(srcL, dstL, srcB, dstB)
						}
						if err != nil {
							b.Fatal(err)
						}
						local, remote := t.Sides(op)
						benchXfer(b, p, dev, op, local, remote, coalesce)
					})
				}
			}
		}
	}
}
