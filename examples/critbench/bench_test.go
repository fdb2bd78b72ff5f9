package critbench

import (
	"fmt"
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl/loopback"
)

// BenchmarkCriticalPath runs pull (reader goroutine), pull-inline and push
// on the same cluster shape, link and arrival rate, one after another in
// one process, so their figures compare directly. b.N is the number of
// requests (use -benchtime=300x or so). Metrics: the critical path from
// RequestFinished on prefill to the result on decode (crit-p50/p99-us), the
// engine-loop time per request (loop-p50/p99-us) and requests per second
// achieved. Prefill TP 2, decode TP 2; push registrations are sent at
// arrival, 2 ms of simulated prefill before RequestFinished. Each case runs
// with no handoff (decode loads the moment prefill answers, which no proxy
// allows) and with a 1 ms handoff (proxy round trip plus a decode step),
// which pull pays on its critical path and push does not.
func BenchmarkCriticalPath(b *testing.B) {
	links := []struct {
		name  string
		model loopback.TransferModel
	}{
		{"instant", loopback.Instant()},
		// 64 KiB per request and rank pair at 2 GB/s plus 50 us.
		{"link-2GBps-50us", loopback.Bandwidth(2e9, 50*time.Microsecond)},
	}
	for _, link := range links {
		for _, handoff := range []time.Duration{0, time.Millisecond} {
			for _, rate := range []float64{200, 1000, 4000} {
				for _, mode := range []Mode{Pull, PullInline, Push} {
					b.Run(fmt.Sprintf("%s/handoff=%v/rate=%g/%s", link.name, handoff, rate, mode), func(b *testing.B) {
						rep, err := Run(b.Context(), Config{
							Mode: mode, PrefillTP: 2, DecodeTP: 2, Requests: b.N, Rate: rate,
							PrefillTime: 2 * time.Millisecond, Link: link.model, Handoff: handoff,
						})
						if err != nil {
							b.Fatal(err)
						}
						if rep.Done != b.N {
							b.Fatalf("%d of %d requests done: %v", rep.Done, b.N, rep.FirstError)
						}
						us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
						b.ReportMetric(0, "ns/op")
						b.ReportMetric(us(rep.Critical.P50), "crit-p50-us")
						b.ReportMetric(us(rep.Critical.P99), "crit-p99-us")
						b.ReportMetric(us(rep.EngineLoop.P50), "loop-p50-us")
						b.ReportMetric(us(rep.EngineLoop.P99), "loop-p99-us")
						if rep.ConfirmMean > 0 {
							b.ReportMetric(us(rep.ConfirmMean), "confirm-us")
						}
					})
				}
			}
		}
	}
}
