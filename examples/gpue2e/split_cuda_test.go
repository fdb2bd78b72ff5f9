//go:build nixl && cuda

package gpue2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/latency"
	"github.com/gonixl/gonixl/nixl"
)

// telemetryOn reports whether the agents capture NIXL's per-transfer
// telemetry (GONIXL_E2E_TELEMETRY=1): the connectors then take their post
// and transfer times from NIXL (internal/xfertime) instead of their own
// clocks, and the raw runs report NIXL's split.
func telemetryOn() bool { return os.Getenv("GONIXL_E2E_TELEMETRY") == "1" }

// splitBlocks is the request of BenchmarkCriticalSplit: 16k tokens (1024
// blocks, 4 GiB) on a GPU, as BenchmarkStagedKV's; 8 blocks on host memory.
func splitBlocks() int {
	if useDRAM() {
		return 8
	}
	return 1024
}

// splitGap is the idle time before each raw transfer of the spaced runs:
// about the time between two of BenchmarkStagedKV's requests (its prefill
// time, 20 ms, the harness's 5 ms start and the decode check).
const splitGap = 40 * time.Millisecond

// BenchmarkCriticalSplit splits the contiguous 16k-token critical path of
// docs/gpu.md (the request of BenchmarkStagedKV/*/staging=off/contiguous,
// 128 coalesced descriptors, one request at a time) into where its time
// goes, with cuMemcpyDtoD of the same bytes as the yardstick (x_DtoD):
//
//   - raw/<op>/notif=<bool>/gap=<d>: the request as bare NIXL on the
//     initiator (create, post, spin on the status, release), back to back
//     (gap=0) or after an idle gap like the connector's requests have, with
//     and without the completion notification the connectors send (NIXL's
//     UCX backend sends it once it sees the data done, so the initiator
//     sees the request done a step later). It reports the p50 of create to
//     done (p50_ms), of create to post returned (post_ms), and, with
//     GONIXL_E2E_TELEMETRY=1, the means of NIXL's own postDuration and
//     xferDuration (nixl_post_ms, nixl_xfer_ms).
//   - conn/<mode>: the request through the connector (prefill finished to
//     decode holding every block, p50_ms) and the initiator's mean post
//     and transfer times (prefill's WRITEs, decode's READs) as the
//     connector records them: on its own clock post_ms runs from before
//     the mapping to the post's return and xfer_ms from there to the
//     transfer seen done; with GONIXL_E2E_TELEMETRY=1 they are NIXL's
//     postDuration and xferDuration (nixl_timed 1), and xferDuration holds
//     the post. outside_ms is what the critical path spends outside them
//     (p50_ms - post_ms - xfer_ms, or p50_ms - xfer_ms when NIXL timed
//     them): the wake before the post, the notification's delivery and the
//     wake-ups after; for pull also RequestFinished and the Params' hop
//     between the processes (finish_ms, hop_ms). Pull reports the mean
//     round trip of its pin exchange too (confirm_ms), which runs beside
//     the READ and is on the critical path only where it takes longer.
//     The means are set against a p50, so on host memory, where the copy
//     ends inside the post, outside_ms can come out below zero.
//
// Run it with -benchtime 16x; the commands are in docs/gpu.md.
func BenchmarkCriticalSplit(b *testing.B) {
	needDevices(b, 1)
	defer withEnv("GONIXL_E2E_REQ_BLOCKS", fmt.Sprint(envInt("GONIXL_E2E_REQ_BLOCKS", splitBlocks())))()
	g := connGeom()
	reqBytes := kvBytes(g.layers, g.reqBlocks)
	y := dtodYardstick(b, reqBytes)
	for _, op := range []nixl.XferOp{nixl.Write, nixl.Read} {
		for _, notif := range []bool{false, true} {
			for _, gap := range []time.Duration{0, splitGap} {
				b.Run(fmt.Sprintf("raw/%s/notif=%v/gap=%s", op, notif, gap), func(b *testing.B) {
					benchRawSplit(b, op, notif, gap, g.reqBlocks, y)
				})
			}
		}
	}
	for _, mode := range []string{"push", "pull"} {
		b.Run("conn/"+mode, func(b *testing.B) { benchConnSplit(b, mode, reqBytes, y) })
	}
}

// benchRawSplit times b.N raw transfers of the contiguous request of
// reqBlocks blocks between the benchmark pair's two processes.
func benchRawSplit(b *testing.B, op nixl.XferOp, notif bool, gap time.Duration, reqBlocks int, y float64) {
	p := benchPair(b, 0)
	bg := benchGeometry()
	if reqBlocks > bg.blocks/2 {
		b.Skipf("a request of %d blocks does not fit the pair's %d blocks twice", reqBlocks, bg.blocks)
	}
	tbase, _, tdev := p.tgt.buf()
	initL := kvLayout(p.init.m, p.init.base, bg.layers, bg.blocks)
	tgtL := initL
	tgtL.Regions = nil
	for i := range initL.NumRegions() {
		tgtL.Regions = append(tgtL.Regions, descriptors.Region{Base: tbase + uint64(i)*initL.RegionLen(), DevID: tdev})
	}
	srcL, dstL := &initL, &tgtL
	if op == nixl.Read {
		srcL, dstL = &tgtL, &initL
	}
	src, dst := make([]int, reqBlocks), make([]int, reqBlocks)
	for i := range src {
		src[i], dst[i] = i, bg.blocks-reqBlocks+i
	}
	t, _, err := descriptors.MapCoalesced(srcL, dstL, descriptors.Request{SrcBlocks: src, DstBlocks: dst})
	if err != nil {
		b.Fatal(err)
	}
	local, remote := t.Sides(op)
	var opts *nixl.Options
	if notif {
		opts = nixl.NotifOptions([]byte("split"))
	}
	if _, _, _, err := rawOnce(p, op, local, remote, opts); err != nil { // warm
		b.Fatal(err)
	}
	var posts, dones []time.Duration
	var nixlPost, nixlXfer time.Duration
	tels := 0
	b.ResetTimer()
	for range b.N {
		if gap > 0 {
			b.StopTimer()
			time.Sleep(gap)
			b.StartTimer()
		}
		post, done, tel, err := rawOnce(p, op, local, remote, opts)
		if err != nil {
			b.Fatal(err)
		}
		posts, dones = append(posts, post), append(dones, done)
		if tel != nil {
			nixlPost += tel.PostDuration
			nixlXfer += tel.XferDuration
			tels++
		}
	}
	b.StopTimer()
	p50 := latency.Summarize(dones).P50
	b.ReportMetric(millis(p50), "p50_ms")
	b.ReportMetric(millis(latency.Summarize(posts).P50), "post_ms")
	b.ReportMetric(float64(t.Bytes)/p50.Seconds()/1e9/y, "x_DtoD")
	b.ReportMetric(float64(t.Len()), "descs")
	if tels > 0 {
		b.ReportMetric(millis(nixlPost/time.Duration(tels)), "nixl_post_ms")
		b.ReportMetric(millis(nixlXfer/time.Duration(tels)), "nixl_xfer_ms")
	}
}

// rawOnce creates, posts and waits for one transfer on the pair's
// initiator, spinning on its status, then releases it. It returns the time
// from the create to the post's return and to the status saying done, and
// NIXL's telemetry of the transfer when the agent captures it.
func rawOnce(p *pair, op nixl.XferOp, local, remote nixl.XferList, opts *nixl.Options) (post, done time.Duration, tel *nixl.XferTelemetry, err error) {
	a := p.init.agent
	start := time.Now()
	h, err := a.CreateXferReq(op, local, remote, p.tgt.name(), opts)
	if err != nil {
		return 0, 0, nil, err
	}
	defer a.ReleaseXferReq(h)
	st, err := a.PostXferReq(h, nil)
	post = time.Since(start)
	if err != nil {
		return 0, 0, nil, err
	}
	deadline := time.Now().Add(waitLimit)
	for st != nixl.StatusSuccess {
		if st, err = a.XferStatus(h); err != nil {
			return 0, 0, nil, err
		}
		if time.Now().After(deadline) {
			return 0, 0, nil, fmt.Errorf("%s of %d bytes in %d descriptors still in flight after %s", op, local.TotalBytes(), len(local.Descs), waitLimit)
		}
	}
	done = time.Since(start)
	if r, ok := a.(nixl.TelemetryReader); ok && telemetryOn() {
		t, err := r.XferTelemetry(h)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("telemetry of a completed %s: %w", op, err)
		}
		tel = &t
	}
	return post, done, tel, nil
}

// benchConnSplit runs b.N contiguous requests one at a time through the
// connector mode with staging off, after one that warms the pair up (the
// handshake) and gives the counters' starting point.
func benchConnSplit(b *testing.B, mode string, reqBytes uint64, y float64) {
	f := ownConn(b, mode, "off")
	f.g.frag = "full"
	warm, err := f.run(1, 1, 20*time.Millisecond, 0, false)
	if err != nil {
		b.Fatal(err)
	}
	x0 := f.initiatorTimes(warm)
	var crit, fin, hop []time.Duration
	var last runStats
	b.ResetTimer()
	for range b.N {
		rs, err := f.run(1, 1, 20*time.Millisecond, 0, false)
		if err != nil {
			b.Fatal(err)
		}
		crit = append(crit, rs.critical...)
		fin, hop = append(fin, rs.finish...), append(hop, rs.hop...)
		last = rs
	}
	b.StopTimer()
	x1 := f.initiatorTimes(last)
	p50 := latency.Summarize(crit).P50
	b.ReportMetric(millis(p50), "p50_ms")
	b.ReportMetric(float64(reqBytes)/p50.Seconds()/1e9/y, "x_DtoD")
	// NIXL's xferDuration runs from the start of postXferReq, so it
	// holds the post; the connector's own clock starts the transfer once
	// the post returned.
	byNIXL := x1.byNIXL > x0.byNIXL
	outside := p50
	if n := x1.xfers - x0.xfers; n > 0 {
		xfer := (x1.xfer - x0.xfer) / time.Duration(n)
		b.ReportMetric(millis(xfer), "xfer_ms")
		outside -= xfer
	}
	if n := x1.posts - x0.posts; n > 0 {
		post := (x1.post - x0.post) / time.Duration(n)
		b.ReportMetric(millis(post), "post_ms")
		if !byNIXL {
			outside -= post
		}
	}
	b.ReportMetric(millis(outside), "outside_ms")
	if byNIXL {
		b.ReportMetric(1, "nixl_timed")
	} else {
		b.ReportMetric(0, "nixl_timed")
	}
	if n := x1.confirms - x0.confirms; n > 0 {
		b.ReportMetric(millis((x1.confirm-x0.confirm)/time.Duration(n)), "confirm_ms")
	}
	if len(fin) > 0 {
		b.ReportMetric(millis(latency.Summarize(fin).P50), "finish_ms")
		b.ReportMetric(millis(latency.Summarize(hop).P50), "hop_ms")
	}
}

// xferCounters are the initiator's cumulative transfer and post times and
// how many transfers NIXL's telemetry timed.
type xferCounters struct {
	xfer, post   time.Duration
	xfers, posts uint64
	byNIXL       uint64
	// Pull's pin exchanges (decode asks prefill, over the side channel,
	// whether it still held the blocks it READ): started with the READ,
	// on the critical path where they take longer than it.
	confirm  time.Duration
	confirms uint64
}

// initiatorTimes reads the initiator's counters: prefill's own (push), or
// decode's as its last reported end carried them (pull).
func (f *connFixture) initiatorTimes(last runStats) xferCounters {
	if f.pushP != nil {
		return countersOf(f.pushP.Stats())
	}
	return last.initiator
}

func countersOf(s connector.Stats) xferCounters {
	return xferCounters{
		xfer: s.XferTime.Sum, xfers: s.XferTime.Count,
		post: s.PostTime.Sum, posts: s.PostTime.Count,
		byNIXL: counter(s, "transfers_timed_by_nixl"),
	}
}
