package stats

import (
	"sync"
	"time"
)

// Bucket upper bounds of the connector histograms. Transfer time, post time,
// bytes and descriptors use vLLM's NIXL connector buckets, so its dashboards
// read ours unchanged.
var (
	// XferTimeBounds (seconds): vLLM's nixl_xfer_time_seconds.
	XferTimeBounds = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0}
	// PostTimeBounds (seconds): vLLM's nixl_post_time_seconds.
	PostTimeBounds = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0}
	// BytesBounds: vLLM's nixl_bytes_transferred, 2 KiB to 8 GiB by factors of 4.
	BytesBounds = powers(11, 33, 2)
	// DescriptorBounds: vLLM's nixl_num_descriptors.
	DescriptorBounds = []float64{10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000}
)

func powers(from, to, step int) []float64 {
	var out []float64
	for e := from; e <= to; e += step {
		out = append(out, float64(uint64(1)<<e))
	}
	return out
}

// Histogram counts observations into fixed buckets, for export as a
// Prometheus histogram. It is safe for concurrent use.
type Histogram struct {
	bounds []float64
	mu     sync.Mutex
	counts []uint64 // per bucket; the last is +Inf
	count  uint64
	sum    float64
}

// NewHistogram returns an empty histogram over ascending upper bounds.
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.mu.Lock()
	h.counts[i]++
	h.count++
	h.sum += v
	h.mu.Unlock()
}

// ObserveDuration records d in seconds.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

// Snapshot returns the histogram's state with cumulative bucket counts.
func (h *Histogram) Snapshot() HistogramSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := HistogramSnapshot{Bounds: h.bounds, Cumulative: make([]uint64, len(h.bounds)), Count: h.count, Sum: h.sum}
	var run uint64
	for i := range h.bounds {
		run += h.counts[i]
		s.Cumulative[i] = run
	}
	return s
}

// HistogramSnapshot is a histogram at one moment: Cumulative[i] counts the
// observations <= Bounds[i]; Count and Sum cover all of them.
type HistogramSnapshot struct {
	Bounds     []float64
	Cumulative []uint64
	Count      uint64
	Sum        float64
}
