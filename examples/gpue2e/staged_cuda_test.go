//go:build nixl && cuda

package gpue2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/latency"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/gpucopy"
	"github.com/gonixl/gonixl/nixl"
)

// stagingFor returns a rank's staging configuration for mode (GONIXL_E2E_
// STAGING: "" or "off", "on", "auto"): slots of one request's KV in the
// rank's memory (as many as fit 8 GiB, 2 to 16), cut into
// GONIXL_E2E_CHUNKS pipelined chunks (default staging.DefaultChunks), and
// on a GPU the gather/scatter kernel on device dev.
// The function it returns frees them.
func stagingFor(m memory, dev int, g connGeometry, mode string) (connector.Staging, func(), error) {
	if mode == "" || mode == "off" {
		return connector.Staging{}, func() {}, nil
	}
	l := kvLayout(m, 0, g.layers, g.blocks)
	slot := (uint64(g.reqBlocks)*uint64(l.NumRegions())*l.BlockLen() + 15) &^ 15
	slots := uint64(min(max((8<<30)/slot, 2), 16))
	base, err := m.alloc(slots * slot)
	if err != nil {
		return connector.Staging{}, nil, err
	}
	st := connector.Staging{Mode: connector.StagingMode(mode), Mem: m.mem(), Base: base, DevID: m.devID(), SlotBytes: slot, Slots: int(slots),
		TransferChunk: uint64(envInt("GONIXL_E2E_XFER_CHUNK", 0)), Chunks: envInt("GONIXL_E2E_CHUNKS", 0)}
	var gpu *connector.GPUCopier
	if m.mem() == nixl.VRAM {
		if gpu, err = connector.NewGPUCopier(dev); err != nil {
			_ = m.free(base)
			return connector.Staging{}, nil, err
		}
		st.Copier = gpu
	}
	return st, func() {
		if gpu != nil {
			_ = gpu.Close()
		}
		_ = m.free(base)
	}, nil
}

// withEnv sets environment variables for the fixtures (and their peer
// processes) started until the returned function restores them.
func withEnv(kv ...string) func() {
	var undo []func()
	for i := 0; i+1 < len(kv); i += 2 {
		k := kv[i]
		old, had := os.LookupEnv(k)
		os.Setenv(k, kv[i+1])
		undo = append(undo, func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		})
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// stageCounters are the staging counters a decode peer reports
// (readiness_queries: pull's, 0 on push).
var stageCounters = []string{"staged_transfers", "direct_transfers", "staging_copy_microseconds", "staging_plan_microseconds", "readiness_queries"}

func counter(s interface{ Get(string) (uint64, bool) }, name string) uint64 {
	v, _ := s.Get(name)
	return v
}

// prefillStaged returns the fixture's prefill counters of staged and
// direct transfers (push: WRITEs; pull: gathers; pull prefill counts no
// direct READs).
func (f *connFixture) prefillStaged() (staged, direct uint64) {
	if f.pullP != nil {
		s := f.pullP.Stats()
		return counter(s, "staged_transfers"), counter(s, "direct_transfers")
	}
	s := f.pushP.Stats()
	return counter(s, "staged_transfers"), counter(s, "direct_transfers")
}

// prefillTimes returns prefill's staging counters of copier and planning
// time, in microseconds.
func (f *connFixture) prefillTimes() (copyUS, planUS uint64) {
	var s interface{ Get(string) (uint64, bool) }
	if f.pullP != nil {
		s = f.pullP.Stats()
	} else {
		s = f.pushP.Stats()
	}
	return counter(s, "staging_copy_microseconds"), counter(s, "staging_plan_microseconds")
}

// TestStagedConnectors moves fragmented requests (fully and in runs of 2
// to 8 blocks) through both connectors with staging on, both KV caches in
// VRAM, decode in another process; every byte is checked on decode, and
// prefill's counters show every transfer went through the slots.
func TestStagedConnectors(t *testing.T) {
	needDevices(t, 1)
	defer withEnv("GONIXL_E2E_STAGING", "on")()
	for _, mode := range []string{"pull", "push"} {
		t.Run(mode, func(t *testing.T) {
			f := ownConn(t, mode, "on")
			for _, frag := range []string{"full", "half"} {
				f.g.frag = frag
				s0, _ := f.prefillStaged()
				st, err := f.run(2, 20, 20*time.Millisecond, 1, true)
				if err != nil {
					t.Fatalf("%s: %v", frag, err)
				}
				l := kvLayout(f.m, 0, f.g.layers, f.g.blocks)
				want := uint64(2*f.g.reqBlocks*l.NumRegions()) * l.BlockLen()
				if st.bytes != want || len(st.critical) != 2 {
					t.Fatalf("%s: checked %d bytes of %d requests, want %d bytes of 2", frag, st.bytes, len(st.critical), want)
				}
				if s1, _ := f.prefillStaged(); s1-s0 != 2 {
					t.Fatalf("%s: %d of 2 requests staged on prefill", frag, s1-s0)
				}
			}
		})
	}
}

// dtodYardstick is cuMemcpyDtoD (memmove on DRAM) of n bytes on device 0,
// in GB/s, the mean of 5 copies after one.
func dtodYardstick(b *testing.B, n uint64) float64 {
	m, err := openMemory(0)
	if err != nil {
		b.Fatal(err)
	}
	defer m.close()
	src, err := m.alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer m.free(src)
	dst, err := m.alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer m.free(dst)
	if err := m.copy(dst, src, n); err != nil {
		b.Fatal(err)
	}
	const reps = 5
	start := time.Now()
	for range reps {
		if err := m.copy(dst, src, n); err != nil {
			b.Fatal(err)
		}
	}
	y := float64(n) * reps / time.Since(start).Seconds() / 1e9
	b.Logf("yardstick: cuMemcpyDtoD of %d bytes: %.1f GB/s", n, y)
	return y
}

// BenchmarkStagedKV moves one 16k-token request of the Qwen3-32B-like KV
// cache (1024 blocks, 4 GiB; GONIXL_E2E_REQ_BLOCKS overrides) at a time
// through each connector, prefill in this process and decode in a peer on
// GPU 0, with contiguous, half fragmented (runs of 2 to 8 blocks) and
// fully fragmented blocks, and staging off (direct descriptors), on and
// auto (the cost model chooses). It reports the request's critical path
// (prefill finished -> decode holds every block, gather and scatter
// included) as p50_ms, the bytes over it as GB/s, the ratio to
// cuMemcpyDtoD of the same bytes in the same run (x_DtoD), and the share
// of requests prefill staged. Pull prefill gathers in the background
// (RequestFinished returns before the gather, finish_ms), and decode reads
// each chunk once a readiness query says it is gathered (ready_q: queries
// per request): the critical path runs until decode holds every block, so
// it includes the gather wherever it does not overlap. One block in every
// 8th region is checked on decode for every request.
func BenchmarkStagedKV(b *testing.B) {
	needDevices(b, 1)
	blocks := 1024
	if useDRAM() {
		blocks = 8
	}
	defer withEnv("GONIXL_E2E_REQ_BLOCKS", fmt.Sprint(envInt("GONIXL_E2E_REQ_BLOCKS", blocks)))()
	g := connGeom()
	reqBytes := kvBytes(g.layers, g.reqBlocks)
	y := dtodYardstick(b, reqBytes)
	for _, mode := range []string{"push", "pull"} {
		for _, st := range []string{"off", "on", "auto"} {
			b.Run(fmt.Sprintf("%s/staging=%s", mode, st), func(b *testing.B) {
				f := ownConn(b, mode, st)
				for _, frag := range []string{"contiguous", "half", "full"} {
					b.Run(frag, func(b *testing.B) {
						f.g.frag = frag
						every := 1
						if frag == "contiguous" {
							every = 0
						}
						s0, _ := f.prefillStaged()
						pc0, pp0 := f.prefillTimes()
						var px0 connector.Timing
						if f.pushP != nil {
							px0 = f.pushP.Stats().XferTime
						}
						var crit, fin, hop, load []time.Duration
						var first, last map[string]uint64
						b.ResetTimer()
						for i := range b.N {
							rs, err := f.run(1, 1, 20*time.Millisecond, every, false)
							if err != nil {
								b.Fatal(err)
							}
							crit = append(crit, rs.critical...)
							fin, hop, load = append(fin, rs.finish...), append(hop, rs.hop...), append(load, rs.load...)
							if i == 0 {
								first = rs.stage
							}
							last = rs.stage
						}
						b.StopTimer()
						if st != "off" {
							// Per request: prefill's and decode's time in
							// the copier and in planning (decode's from the
							// second request on).
							pc1, pp1 := f.prefillTimes()
							n := float64(b.N)
							b.ReportMetric(float64(pc1-pc0)/n/1e3, "pre_copy_ms")
							b.ReportMetric(float64(pp1-pp0)/n/1e3, "pre_plan_ms")
							if b.N > 1 && first != nil && last != nil {
								k := float64(b.N - 1)
								b.ReportMetric(float64(last["staging_copy_microseconds"]-first["staging_copy_microseconds"])/k/1e3, "dec_copy_ms")
								b.ReportMetric(float64(last["staging_plan_microseconds"]-first["staging_plan_microseconds"])/k/1e3, "dec_plan_ms")
								if f.pullP != nil {
									b.ReportMetric(float64(last["readiness_queries"]-first["readiness_queries"])/k, "ready_q")
								}
							}
						}
						// The transfers' own time, post to seen complete
						// (push: prefill's WRITEs; pull: decode's READs).
						if f.pushP != nil {
							x := f.pushP.Stats().XferTime
							if n := x.Count - px0.Count; n > 0 {
								b.ReportMetric(millis((x.Sum-px0.Sum)/time.Duration(n)), "xfer_ms")
							}
						} else if b.N > 1 && first != nil && last != nil {
							if n := last["xfers"] - first["xfers"]; n > 0 {
								b.ReportMetric(float64(last["xfer_us"]-first["xfer_us"])/float64(n)/1e3, "xfer_ms")
							}
						}
						if len(fin) > 0 {
							// Pull's critical path in parts: prefill's
							// RequestFinished (no longer its gather, which
							// runs in the background), the Params' hop to
							// the decode process (the harness's pipe),
							// decode's load (the gather's wait included).
							b.ReportMetric(millis(latency.Summarize(fin).P50), "finish_ms")
							b.ReportMetric(millis(latency.Summarize(hop).P50), "hop_ms")
							b.ReportMetric(millis(latency.Summarize(load).P50), "load_ms")
						}
						p50 := latency.Summarize(crit).P50
						gbs := float64(reqBytes) / p50.Seconds() / 1e9
						s1, _ := f.prefillStaged()
						b.ReportMetric(millis(p50), "p50_ms")
						b.ReportMetric(gbs, "GB/s")
						b.ReportMetric(gbs/y, "x_DtoD")
						if st != "off" {
							b.ReportMetric(float64(s1-s0)/float64(b.N), "staged")
						}
					})
				}
			})
		}
	}
}

// gatherCase is a fragmented gather on device 0: n fragments of len bytes
// picked at random from a source twice as large, into one contiguous
// buffer, with the pattern's offsets to check them.
type gatherCase struct {
	m        memory
	src, dst uint64
	segs     []connector.Seg
	spans    []span // destination spans and the source pattern they hold
	bytes    uint64
}

func newGatherCase(tb testing.TB, n int, size uint64) *gatherCase {
	m, err := openMemory(0)
	if err != nil {
		tb.Fatal(err)
	}
	c := &gatherCase{m: m, bytes: uint64(n) * size}
	if c.src, err = m.alloc(2 * c.bytes); err != nil {
		tb.Fatal(err)
	}
	if c.dst, err = m.alloc(c.bytes); err != nil {
		tb.Fatal(err)
	}
	if err := fillSpans(m, 5, []span{{Addr: c.src, Len: 2 * c.bytes}}); err != nil {
		tb.Fatal(err)
	}
	perm := rand.New(rand.NewPCG(3, 4)).Perm(2 * n)
	for i := range n {
		from := uint64(perm[i]) * size
		c.segs = append(c.segs, connector.Seg{Src: c.src + from, Dst: c.dst + uint64(i)*size, Len: size})
		c.spans = append(c.spans, span{Addr: c.dst + uint64(i)*size, PatOff: from, Len: size})
	}
	return c
}

func (c *gatherCase) close() {
	c.m.free(c.src)
	c.m.free(c.dst)
	c.m.close()
}

// TestGPUCopier: the kernel copies aligned and unaligned segments of every
// size exactly (the destination is checked byte for byte), and a closed
// copier refuses to copy.
func TestGPUCopier(t *testing.T) {
	needDevices(t, 1)
	if useDRAM() {
		t.Skip("the GPU copier needs a GPU")
	}
	cp, err := gpucopy.New(0)
	if err != nil {
		t.Fatal(err)
	}
	c := newGatherCase(t, 512, 4096)
	defer c.close()
	if err := c.m.set(c.dst, 0, c.bytes); err != nil {
		t.Fatal(err)
	}
	// Unaligned and odd-sized segments too: the byte path of the kernel.
	segs := append([]connector.Seg(nil), c.segs...)
	spans := append([]span(nil), c.spans...)
	for i, n := range []uint64{1, 3, 15, 17, 100, 4095} {
		off := uint64(i*8191 + 3)
		segs[i] = connector.Seg{Src: c.src + off, Dst: c.dst + uint64(i)*4096 + 1, Len: n}
		spans[i] = span{Addr: c.dst + uint64(i)*4096 + 1, PatOff: off, Len: n}
	}
	if err := cp.Copy(segs); err != nil {
		t.Fatal(err)
	}
	if err := checkPattern(c.m, 5, spans); err != nil {
		t.Fatal(err)
	}
	// By block ids: 16 blocks of 4 regions (64 blocks of 4 KiB each in the
	// source), the run [256, 1280) of each, gathered into the slot and
	// scattered back into zeroed blocks.
	bcp := cp
	t.Logf("block kernel in the PTX: %v", bcp.HasBlockKernel())
	const regions, perRegion, blockLen = 4, 64, 4096
	bases := []uint64{c.src, c.src + perRegion*blockLen, c.src + 2*perRegion*blockLen, c.src + 3*perRegion*blockLen}
	ids := rand.New(rand.NewPCG(8, 9)).Perm(perRegion)[:16]
	if err := c.m.set(c.dst, 0, c.bytes); err != nil {
		t.Fatal(err)
	}
	g := staging.BlockCopy{Bases: bases, Blocks: ids, BlockLen: blockLen, Off: 256, Len: 1024, Slot: c.dst, SlotStride: 16 * 1024, ToSlot: true}
	if err := bcp.CopyBlocks(g); err != nil {
		t.Fatal(err)
	}
	var want []span
	for r := range regions {
		for j, id := range ids {
			want = append(want, span{Addr: c.dst + uint64(r)*16*1024 + uint64(j)*1024, PatOff: bases[r] - c.src + uint64(id)*blockLen + 256, Len: 1024})
		}
	}
	if err := checkPattern(c.m, 5, want); err != nil {
		t.Fatal("gather by blocks:", err)
	}
	back := g
	back.ToSlot = false
	if err := c.m.set(c.src, 0, 2*c.bytes); err != nil {
		t.Fatal(err)
	}
	if err := bcp.CopyBlocks(back); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i].Addr = c.src + want[i].PatOff
	}
	if err := checkPattern(c.m, 5, want); err != nil {
		t.Fatal("scatter by blocks:", err)
	}
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cp.Close(); err != nil {
		t.Fatal("second close:", err)
	}
	if err := cp.Copy(segs[:1]); err == nil {
		t.Fatal("a closed copier copied")
	}
}

// BenchmarkGatherKernel gathers the fragments of a 16k-token request
// (131,072 fragments of 32 KiB, 4 GiB, from an 8 GiB source) into one
// contiguous buffer with the staging kernel ("fragments"), and the same
// bytes as 128 runs of 32 MiB ("runs", a contiguous request's regions),
// against cuMemcpyDtoD of the same bytes in the same run. Each PTX file in
// GONIXL_GPUCOPY_PTX_LIST (comma-separated) is measured beside the
// embedded kernel.
func BenchmarkGatherKernel(b *testing.B) {
	needDevices(b, 1)
	if useDRAM() {
		b.Skip("the GPU copier needs a GPU")
	}
	c := newGatherCase(b, 131072, 32<<10)
	defer c.close()
	y := dtodYardstick(b, c.bytes)
	var runs []connector.Seg
	for i := range 128 {
		n := c.bytes / 128
		runs = append(runs, connector.Seg{Src: c.src + uint64(i)*2*n, Dst: c.dst + uint64(i)*n, Len: n})
	}
	kernels := []string{"embedded"}
	if l := os.Getenv("GONIXL_GPUCOPY_PTX_LIST"); l != "" {
		kernels = append(kernels, strings.Split(l, ",")...)
	}
	for _, k := range kernels {
		var cp *gpucopy.Copier
		var err error
		if k == "embedded" {
			cp, err = gpucopy.NewWithPTX(0, gpucopy.EmbeddedPTX())
		} else {
			var src []byte
			if src, err = os.ReadFile(k); err == nil {
				cp, err = gpucopy.NewWithPTX(0, string(src))
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		// The same fragments as block ids: 128 regions of 2048 blocks of
		// 32 KiB over the source, 1024 random blocks a region.
		bl := staging.BlockCopy{BlockLen: 32 << 10, Len: 32 << 10, Slot: c.dst, SlotStride: 1024 * (32 << 10), ToSlot: true,
			Blocks: rand.New(rand.NewPCG(6, 7)).Perm(2048)[:1024]}
		for r := range 128 {
			bl.Bases = append(bl.Bases, c.src+uint64(r)*2048*(32<<10))
		}
		b.Run(fmt.Sprintf("ptx=%s/blocks", filepath.Base(k)), func(b *testing.B) {
			if err := cp.CopyBlocks(bl); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(bl.Bytes()))
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if err := cp.CopyBlocks(bl); err != nil {
					b.Fatal(err)
				}
			}
			el := time.Since(start)
			b.StopTimer()
			gbs := float64(bl.Bytes()) * float64(b.N) / el.Seconds() / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(gbs/y, "x_DtoD")
		})
		for _, shape := range []struct {
			name string
			segs []connector.Seg
		}{{"fragments", c.segs}, {"runs", runs}} {
			b.Run(fmt.Sprintf("ptx=%s/%s", filepath.Base(k), shape.name), func(b *testing.B) {
				if err := cp.Copy(shape.segs); err != nil {
					b.Fatal(err)
				}
				if shape.name == "fragments" {
					sample := make([]span, 0, 64)
					for i := 0; i < len(c.spans); i += len(c.spans) / 64 {
						sample = append(sample, c.spans[i])
					}
					if err := checkPattern(c.m, 5, sample); err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(int64(c.bytes))
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					if err := cp.Copy(shape.segs); err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start)
				b.StopTimer()
				gbs := float64(c.bytes) * float64(b.N) / el.Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(gbs/y, "x_DtoD")
			})
		}
		cp.Close()
	}
}

// BenchmarkKVPrepared is BenchmarkKV's per-block request built the way
// vLLM builds it: each side's block list prepared once (PrepXferDlist,
// one descriptor per region and block) and every request made from
// indices (MakeXferReq, which merges consecutive indices), against
// CreateXferReq per request in BenchmarkKV.
func BenchmarkKVPrepared(b *testing.B) {
	needDevices(b, 1)
	g := benchGeometry()
	for _, op := range []nixl.XferOp{nixl.Write, nixl.Read} {
		for _, frag := range []bool{false, true} {
			name := fmt.Sprintf("gpu0-gpu0/%s/%s/prepared", op, map[bool]string{false: "contiguous", true: "fragmented"}[frag])
			b.Run(name, func(b *testing.B) {
				p := benchPair(b, 0)
				y := yardstick(b, 0)
				tbase, _, _ := p.tgt.buf()
				initL := kvLayout(p.init.m, p.init.base, g.layers, g.blocks)
				tgtL := initL
				tgtL.Regions = nil
				for i := range initL.NumRegions() {
					tgtL.Regions = append(tgtL.Regions, descriptors.Region{Base: tbase + uint64(i)*initL.RegionLen(), DevID: p.remoteDesc(0, 0).DevID})
				}
				a := p.init.agent
				lh, err := a.PrepXferDlist("", initL.BlockDescs(), nil)
				if err != nil {
					b.Fatal(err)
				}
				defer a.ReleaseDlistHandle(lh)
				rh, err := a.PrepXferDlist(p.tgt.name(), tgtL.BlockDescs(), nil)
				if err != nil {
					b.Fatal(err)
				}
				defer a.ReleaseDlistHandle(rh)
				srcB, dstB := kvRequest(g, frag)
				localB, remoteB := srcB, dstB // WRITE: this side is the source
				if op == nixl.Read {
					localB, remoteB = dstB, srcB
				}
				var li, ri []int
				for r := range initL.NumRegions() {
					for i := range localB {
						li = append(li, initL.DescID(r, localB[i]))
						ri = append(ri, tgtL.DescID(r, remoteB[i]))
					}
				}
				one := func() error {
					h, err := a.MakeXferReq(op, lh, li, rh, ri, nil)
					if err != nil {
						return err
					}
					defer a.ReleaseXferReq(h)
					st, err := a.PostXferReq(h, nil)
					for deadline := time.Now().Add(waitLimit); err == nil && st != nixl.StatusSuccess; {
						p.tgt.progress()
						if st, err = a.XferStatus(h); err == nil && time.Now().After(deadline) {
							err = fmt.Errorf("%s still in flight after %s", op, waitLimit)
						}
					}
					return err
				}
				if err := one(); err != nil {
					b.Fatal(err)
				}
				bytes := uint64(len(li)) * initL.BlockLen()
				b.SetBytes(int64(bytes))
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					if err := one(); err != nil {
						b.Fatal(err)
					}
				}
				gbs := float64(bytes) * float64(b.N) / time.Since(start).Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(gbs/y, "x_memcpy")
				b.ReportMetric(float64(len(li)), "indices")
			})
		}
	}
}
