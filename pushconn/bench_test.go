package pushconn

import (
	"strconv"
	"testing"
	"time"

	"github.com/gonixl/gonixl/internal/latency"
	"github.com/gonixl/gonixl/internal/lease"
)

// BenchmarkEngineLoopCalls measures what the engines' loops pay per request
// inside the connector: Register on decode, RequestFinished on prefill, and
// Drain and DrainFreed calls (each returning one request, as at low load),
// one request at a time through a TP 1 -> 1 pair on an instant loopback
// link. Reported per call: p50 and p99 in ns.
func BenchmarkEngineLoopCalls(b *testing.B) {
	r := newRig(b, rigConfig{numBlocks: 4096, clock: lease.SystemClock{}})
	c, p := r.consumers[0], r.producers[0]
	var reg, fin, drain, freed latency.Recorder
	pf := Coordinates(r.pre)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := "req-" + strconv.Itoa(i)
		blocks := []int{(2 * i) % 4096, (2*i + 1) % 4096}
		t0 := time.Now()
		if err := c.Register(id, pf, blocks); err != nil {
			b.Fatal(err)
		}
		reg.Add(time.Since(t0))
		t0 = time.Now()
		if _, err := p.RequestFinished(id, blocks); err != nil {
			b.Fatal(err)
		}
		fin.Add(time.Since(t0))
		for got := false; !got; {
			t0 = time.Now()
			res := c.Drain()
			if len(res) > 0 {
				drain.Add(time.Since(t0))
				if res[0].Err != nil {
					b.Fatal(res[0].Err)
				}
				got = true
				continue
			}
			<-c.Ready()
		}
		for got := false; !got; {
			t0 = time.Now()
			ids := p.DrainFreed()
			if len(ids) > 0 {
				freed.Add(time.Since(t0))
				got = true
				continue
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	b.StopTimer()
	for name, rec := range map[string]*latency.Recorder{"register": &reg, "finished": &fin, "drain": &drain, "drainfreed": &freed} {
		s := rec.Summary()
		b.ReportMetric(float64(s.P50.Nanoseconds()), name+"-p50-ns")
		b.ReportMetric(float64(s.P99.Nanoseconds()), name+"-p99-ns")
	}
}
