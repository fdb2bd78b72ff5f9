package stats

import (
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/latency"
)

// window is the number of recent samples kept for the time percentiles.
const window = 4096

// Set is the statistics of one connector instance (one rank). The exported
// counters are those every connector keeps; Counter registers more.
type Set struct {
	Transfers              *Counter // successful transfers
	Bytes                  *Counter // bytes moved by successful transfers
	Descriptors            *Counter // descriptors posted by successful transfers
	FailedTransfers        *Counter // transfers that failed to post or in flight
	FailedNotifications    *Counter // notifications that could not be sent
	FailedHandshakes       *Counter // side-channel handshakes that failed or were refused
	ExpiredRequests        *Counter // requests whose blocks were released by lease expiry
	UnknownNotifications   *Counter // completions for requests never seen
	LateNotifications      *Counter // completions that arrived after the lease expired
	MalformedNotifications *Counter // notifications that did not decode
	MalformedFrames        *Counter // side-channel frames that did not decode

	xferTime *latency.Window
	postTime *latency.Window
	xferHist *Histogram
	postHist *Histogram
	byteHist *Histogram
	descHist *Histogram

	mu     sync.Mutex
	byName map[string]*Counter
	order  []*Counter
	shared int // counters registered by New; the rest are Extra
}

// New returns a Set with every shared counter at zero.
func New() *Set {
	s := &Set{
		xferTime: latency.NewWindow(window),
		postTime: latency.NewWindow(window),
		xferHist: NewHistogram(XferTimeBounds),
		postHist: NewHistogram(PostTimeBounds),
		byteHist: NewHistogram(BytesBounds),
		descHist: NewHistogram(DescriptorBounds),
		byName:   map[string]*Counter{},
	}
	s.Transfers = s.Counter("transfers", "Successful KV-cache transfers.")
	s.Bytes = s.Counter("bytes_transferred", "Bytes moved by successful KV-cache transfers.")
	s.Descriptors = s.Counter("descriptors", "Descriptors posted by successful KV-cache transfers.")
	s.FailedTransfers = s.Counter("failed_transfers", "KV-cache transfers that failed to post or in flight.")
	s.FailedNotifications = s.Counter("failed_notifications", "Notifications that could not be sent.")
	s.FailedHandshakes = s.Counter("failed_handshakes", "Side-channel handshakes that failed or were refused.")
	s.ExpiredRequests = s.Counter("expired_requests", "Requests whose held KV blocks were released by lease expiry.")
	s.UnknownNotifications = s.Counter("unknown_notifications", "Notifications naming a request this rank does not know.")
	s.LateNotifications = s.Counter("late_notifications", "Completions that arrived after the request's lease expired.")
	s.MalformedNotifications = s.Counter("malformed_notifications", "Notifications that could not be decoded.")
	s.MalformedFrames = s.Counter("malformed_frames", "Side-channel frames that could not be decoded.")
	s.shared = len(s.order)
	return s
}

// Counter returns the counter with this name, registering it with help on
// first use. Connectors register their own counters once, at construction.
func (s *Set) Counter(name, help string) *Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.byName[name]; ok {
		return c
	}
	c := &Counter{name: name, help: help}
	s.byName[name] = c
	s.order = append(s.order, c)
	return c
}

// RecordPost records how long posting one transfer took (descriptor
// preparation and the post call).
func (s *Set) RecordPost(d time.Duration) {
	s.postTime.Add(d)
	s.postHist.ObserveDuration(d)
}

// RecordTransfer records one successful transfer: its size, its number of
// descriptors and the time from post to completion.
func (s *Set) RecordTransfer(bytes uint64, descriptors int, d time.Duration) {
	s.Transfers.Inc()
	s.Bytes.Add(bytes)
	s.Descriptors.Add(uint64(descriptors))
	s.xferTime.Add(d)
	s.xferHist.ObserveDuration(d)
	s.byteHist.Observe(float64(bytes))
	s.descHist.Observe(float64(descriptors))
}

// Snapshot returns a copy of every counter and time digest.
func (s *Set) Snapshot() Snapshot {
	snap := Snapshot{
		Transfers:              s.Transfers.Load(),
		Bytes:                  s.Bytes.Load(),
		Descriptors:            s.Descriptors.Load(),
		FailedTransfers:        s.FailedTransfers.Load(),
		FailedNotifications:    s.FailedNotifications.Load(),
		FailedHandshakes:       s.FailedHandshakes.Load(),
		ExpiredRequests:        s.ExpiredRequests.Load(),
		UnknownNotifications:   s.UnknownNotifications.Load(),
		LateNotifications:      s.LateNotifications.Load(),
		MalformedNotifications: s.MalformedNotifications.Load(),
		MalformedFrames:        s.MalformedFrames.Load(),
		XferTime:               s.xferTime.Stats(),
		PostTime:               s.postTime.Stats(),
		XferTimeHist:           s.xferHist.Snapshot(),
		PostTimeHist:           s.postHist.Snapshot(),
		BytesHist:              s.byteHist.Snapshot(),
		DescriptorsHist:        s.descHist.Snapshot(),
	}
	s.mu.Lock()
	for _, c := range s.order[s.shared:] {
		snap.Extra = append(snap.Extra, CounterValue{Name: c.name, Help: c.help, Value: c.Load()})
	}
	s.mu.Unlock()
	return snap
}

// CounterValue is one registered counter's value in a Snapshot.
type CounterValue struct {
	Name  string
	Help  string
	Value uint64
}

// Snapshot is a copy of a Set at one moment. Time digests cover successful
// transfers (XferTime) and every post (PostTime); their percentiles cover the
// most recent samples.
type Snapshot struct {
	Transfers              uint64
	Bytes                  uint64
	Descriptors            uint64
	FailedTransfers        uint64
	FailedNotifications    uint64
	FailedHandshakes       uint64
	ExpiredRequests        uint64
	UnknownNotifications   uint64
	LateNotifications      uint64
	MalformedNotifications uint64
	MalformedFrames        uint64
	XferTime               latency.Stats
	PostTime               latency.Stats
	// Histograms of the same samples over fixed buckets (vLLM's), for
	// Prometheus: transfer and post time in seconds, bytes and descriptors
	// per successful transfer.
	XferTimeHist    HistogramSnapshot
	PostTimeHist    HistogramSnapshot
	BytesHist       HistogramSnapshot
	DescriptorsHist HistogramSnapshot
	// Extra holds the counters a connector registered itself, in
	// registration order.
	Extra []CounterValue
}

// Get returns the value of the extra counter name, and whether it exists.
func (s Snapshot) Get(name string) (uint64, bool) {
	for _, c := range s.Extra {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// LogLine formats the snapshot as the one-line "KV Transfer metrics:" report.
func (s Snapshot) LogLine() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }
	var avgMB, avgDescs, mbps float64
	if s.Transfers > 0 {
		avgMB = float64(s.Bytes) / float64(s.Transfers) / 1e6
		avgDescs = float64(s.Descriptors) / float64(s.Transfers)
	}
	if s.XferTime.Sum > 0 {
		mbps = float64(s.Bytes) / 1e6 / s.XferTime.Sum.Seconds()
	}
	line := fmt.Sprintf("KV Transfer metrics: transfers=%d avg_xfer_ms=%s p90_xfer_ms=%s avg_post_ms=%s p90_post_ms=%s avg_mb_per_transfer=%.3f throughput_mb_s=%.1f avg_descriptors=%.1f failed_transfers=%d failed_notifications=%d failed_handshakes=%d expired_requests=%d unknown_notifications=%d late_notifications=%d malformed_notifications=%d malformed_frames=%d",
		s.Transfers, ms(s.XferTime.Mean), ms(s.XferTime.P90), ms(s.PostTime.Mean), ms(s.PostTime.P90),
		avgMB, mbps, avgDescs, s.FailedTransfers, s.FailedNotifications, s.FailedHandshakes, s.ExpiredRequests,
		s.UnknownNotifications, s.LateNotifications, s.MalformedNotifications, s.MalformedFrames)
	for _, c := range s.Extra {
		line += fmt.Sprintf(" %s=%d", c.Name, c.Value)
	}
	return line
}

// Fields returns every figure of LogLine as a zap field of the same name,
// so structured log pipelines need not parse the line.
func (s Snapshot) Fields() []zap.Field {
	var avgMB, avgDescs, mbps float64
	if s.Transfers > 0 {
		avgMB = float64(s.Bytes) / float64(s.Transfers) / 1e6
		avgDescs = float64(s.Descriptors) / float64(s.Transfers)
	}
	if s.XferTime.Sum > 0 {
		mbps = float64(s.Bytes) / 1e6 / s.XferTime.Sum.Seconds()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	out := []zap.Field{
		zap.Uint64("transfers", s.Transfers),
		zap.Float64("avg_xfer_ms", ms(s.XferTime.Mean)),
		zap.Float64("p90_xfer_ms", ms(s.XferTime.P90)),
		zap.Float64("avg_post_ms", ms(s.PostTime.Mean)),
		zap.Float64("p90_post_ms", ms(s.PostTime.P90)),
		zap.Float64("avg_mb_per_transfer", avgMB),
		zap.Float64("throughput_mb_s", mbps),
		zap.Float64("avg_descriptors", avgDescs),
		zap.Uint64("failed_transfers", s.FailedTransfers),
		zap.Uint64("failed_notifications", s.FailedNotifications),
		zap.Uint64("failed_handshakes", s.FailedHandshakes),
		zap.Uint64("expired_requests", s.ExpiredRequests),
		zap.Uint64("unknown_notifications", s.UnknownNotifications),
		zap.Uint64("late_notifications", s.LateNotifications),
		zap.Uint64("malformed_notifications", s.MalformedNotifications),
		zap.Uint64("malformed_frames", s.MalformedFrames),
	}
	for _, c := range s.Extra {
		out = append(out, zap.Uint64(c.Name, c.Value))
	}
	return out
}

// changed reports whether any count differs between two snapshots.
func (s Snapshot) changed(prev Snapshot) bool {
	if s.Transfers != prev.Transfers || s.FailedTransfers != prev.FailedTransfers ||
		s.FailedNotifications != prev.FailedNotifications || s.FailedHandshakes != prev.FailedHandshakes ||
		s.ExpiredRequests != prev.ExpiredRequests || s.UnknownNotifications != prev.UnknownNotifications ||
		s.LateNotifications != prev.LateNotifications || s.MalformedNotifications != prev.MalformedNotifications ||
		s.MalformedFrames != prev.MalformedFrames || s.PostTime.Count != prev.PostTime.Count ||
		len(s.Extra) != len(prev.Extra) {
		return true
	}
	for i := range s.Extra {
		if s.Extra[i].Value != prev.Extra[i].Value {
			return true
		}
	}
	return false
}
