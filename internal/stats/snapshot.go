package stats

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/latency"
)

// CounterValue is one connector-specific counter's value in a Snapshot.
type CounterValue struct {
	Name  string
	Help  string
	Value uint64
}

// Snapshot is a copy of a Set at one moment: package connector's Stats
// (whose fields are documented there, for users), which connector makes
// of it field by field.
type Snapshot struct {
	Transfers, Bytes, Descriptors                            uint64
	FailedTransfers, FailedNotifications, FailedHandshakes   uint64
	ExpiredRequests, UnknownNotifications, LateNotifications uint64
	MalformedNotifications, MalformedFrames                  uint64
	XferTime, PostTime                                       latency.Stats
	XferTimeHist, PostTimeHist, BytesHist, DescriptorsHist   HistogramSnapshot
	Extra                                                    []CounterValue
	// PrefixHitBlocks is a decode rank's prefix-hit blocks per KV-cache
	// group (Set.SetGroups), nil where none were registered.
	PrefixHitBlocks []GroupValue
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

// averages derives the per-transfer figures of the metrics line: MB and
// descriptors per transfer, and throughput in MB/s over the transfer time.
func (s Snapshot) averages() (avgMB, avgDescs, mbps float64) {
	if s.Transfers > 0 {
		avgMB = float64(s.Bytes) / float64(s.Transfers) / 1e6
		avgDescs = float64(s.Descriptors) / float64(s.Transfers)
	}
	if s.XferTime.Sum > 0 {
		mbps = float64(s.Bytes) / 1e6 / s.XferTime.Sum.Seconds()
	}
	return avgMB, avgDescs, mbps
}

// LogLine formats the snapshot as the one-line "KV Transfer metrics:" report.
func (s Snapshot) LogLine() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }
	avgMB, avgDescs, mbps := s.averages()
	line := fmt.Sprintf("KV Transfer metrics: transfers=%d avg_xfer_ms=%s p90_xfer_ms=%s avg_post_ms=%s p90_post_ms=%s avg_mb_per_transfer=%.3f throughput_mb_s=%.1f avg_descriptors=%.1f failed_transfers=%d failed_notifications=%d failed_handshakes=%d expired_requests=%d unknown_notifications=%d late_notifications=%d malformed_notifications=%d malformed_frames=%d",
		s.Transfers, ms(s.XferTime.Mean), ms(s.XferTime.P90), ms(s.PostTime.Mean), ms(s.PostTime.P90),
		avgMB, mbps, avgDescs, s.FailedTransfers, s.FailedNotifications, s.FailedHandshakes, s.ExpiredRequests,
		s.UnknownNotifications, s.LateNotifications, s.MalformedNotifications, s.MalformedFrames)
	for _, c := range s.Extra {
		line += fmt.Sprintf(" %s=%d", c.Name, c.Value)
	}
	if len(s.PrefixHitBlocks) > 0 {
		line += " prefix_hit_blocks=" + groupsLine(s.PrefixHitBlocks)
	}
	return line
}

// Fields returns every figure of LogLine as a zap field of the same name,
// so structured log pipelines need not parse the line.
func (s Snapshot) Fields() []zap.Field {
	avgMB, avgDescs, mbps := s.averages()
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
	if len(s.PrefixHitBlocks) > 0 {
		vs := make([]uint64, len(s.PrefixHitBlocks))
		for i, v := range s.PrefixHitBlocks {
			vs[i] = v.Value
		}
		out = append(out, zap.Uint64s("prefix_hit_blocks", vs))
	}
	return out
}
