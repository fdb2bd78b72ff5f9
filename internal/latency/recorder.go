package latency

import (
	"slices"
	"sync"
	"time"
)

// Recorder keeps every sample it is given. It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	samples []time.Duration
}

// Add records one sample.
func (r *Recorder) Add(d time.Duration) {
	r.mu.Lock()
	r.samples = append(r.samples, d)
	r.mu.Unlock()
}

// Summary returns the digest of every sample so far.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	s := slices.Clone(r.samples)
	r.mu.Unlock()
	return Summarize(s)
}

// Reset forgets every sample.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.samples = r.samples[:0]
	r.mu.Unlock()
}

// Window keeps the last Size samples for percentiles, and the count and sum
// of all samples ever added for the mean. It is safe for concurrent use.
type Window struct {
	mu    sync.Mutex
	ring  []time.Duration
	next  int
	full  bool
	count uint64
	sum   time.Duration
}

// NewWindow returns a window over the last size samples (size >= 1).
func NewWindow(size int) *Window {
	return &Window{ring: make([]time.Duration, max(1, size))}
}

// Add records one sample.
func (w *Window) Add(d time.Duration) {
	w.mu.Lock()
	w.ring[w.next] = d
	w.next++
	if w.next == len(w.ring) {
		w.next, w.full = 0, true
	}
	w.count++
	w.sum += d
	w.mu.Unlock()
}

// Stats is a Window's digest: Count, Sum and Mean cover every sample ever
// added; the percentiles cover the samples still in the window.
type Stats struct {
	Count uint64
	Sum   time.Duration
	Mean  time.Duration
	P50   time.Duration
	P90   time.Duration
	P99   time.Duration
}

// Stats returns the window's digest.
func (w *Window) Stats() Stats {
	w.mu.Lock()
	n := w.next
	if w.full {
		n = len(w.ring)
	}
	recent := slices.Clone(w.ring[:n])
	st := Stats{Count: w.count, Sum: w.sum}
	w.mu.Unlock()
	if st.Count > 0 {
		st.Mean = st.Sum / time.Duration(st.Count)
	}
	slices.Sort(recent)
	st.P50 = Percentile(recent, 50)
	st.P90 = Percentile(recent, 90)
	st.P99 = Percentile(recent, 99)
	return st
}
