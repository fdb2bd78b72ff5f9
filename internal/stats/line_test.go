package stats

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

const mib = 1 << 20

// newTestLogger returns an interval logger over s that logs into an
// observer, tagged as a connector rank tags it.
func newTestLogger(s *Set) (*intervalLogger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	return newIntervalLogger(zap.New(core), s, zap.Int("tp_rank", 0)), logs
}

// lineKeys returns the keys of a metrics line, in order.
func lineKeys(t *testing.T, line string) []string {
	t.Helper()
	body, ok := strings.CutPrefix(line, "KV Transfer metrics: ")
	require.True(t, ok, "line %q", line)
	var keys []string
	for _, kv := range strings.Split(body, ", ") {
		k, _, ok := strings.Cut(kv, "=")
		require.True(t, ok, "item %q of %q", kv, line)
		keys = append(keys, k)
	}
	return keys
}

// A rank's line uses vLLM's keys (nixl/stats.py reduce, vllm 0.34.0), in
// vLLM's order, then gonixl's own counters that moved, each as "gonixl.<name>".
func TestLineKeys(t *testing.T) {
	s := New()
	reg := s.Counter("registrations_received", "PUSH_REG notifications received.")
	s.Counter("push_fail_sent", "PUSH_FAIL notifications sent.") // stays 0: not in the line
	s.RecordTransfer(mib, 2, time.Millisecond)
	s.RecordPost(time.Millisecond)
	s.FailedHandshakes.Inc()
	s.UnknownNotifications.Inc()
	reg.Inc()
	l, logs := newTestLogger(s)
	l.tick()
	require.Equal(t, 1, logs.Len())
	assert.Equal(t, []string{
		"Num successful transfers", "Avg xfer time (ms)", "P90 xfer time (ms)", "Avg post time (ms)", "P90 post time (ms)",
		"Avg MB per transfer", "Throughput (MB/s)", "Avg number of descriptors",
		"Num failed transfers", "Num KV expired reqs", "Num notifs after expiry",
		"gonixl.failed_handshakes", "gonixl.unknown_notifications", "gonixl.registrations_received",
	}, lineKeys(t, logs.All()[0].Message))
}

// Every figure counts one interval only (vLLM resets its stats after each
// line: metrics.py KVConnectorLogging.log, vllm 0.34.0): after two intervals
// the second line holds the second interval's counts, not the sum. An
// interval with nothing counted logs nothing and resets nothing.
func TestLinePerInterval(t *testing.T) {
	s := New()
	reg := s.Counter("registrations_received", "PUSH_REG notifications received.")
	l, logs := newTestLogger(s)

	s.RecordTransfer(2*mib, 3, 4*time.Millisecond)
	s.RecordTransfer(1*mib, 5, 2*time.Millisecond)
	s.RecordPost(time.Millisecond)
	s.RecordPost(3 * time.Millisecond)
	s.FailedTransfers.Inc()
	s.FailedNotifications.Inc()
	s.FailedHandshakes.Inc()
	s.ExpiredRequests.Inc()
	s.LateNotifications.Add(2)
	l.tick()
	l.tick() // nothing counted: no line

	s.RecordTransfer(1*mib, 1, 10*time.Millisecond)
	s.RecordPost(500 * time.Microsecond)
	reg.Inc()
	l.tick()

	s.ExpiredRequests.Inc() // failures only: the figures read 0, as vLLM's do
	l.tick()

	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Message)
	}
	assert.Equal(t, []string{
		"KV Transfer metrics: Num successful transfers=2, Avg xfer time (ms)=3.0, P90 xfer time (ms)=3.8, " +
			"Avg post time (ms)=2.0, P90 post time (ms)=2.8, Avg MB per transfer=1.5, Throughput (MB/s)=500.0, " +
			"Avg number of descriptors=4.0, Num failed transfers=3, Num KV expired reqs=1, Num notifs after expiry=2, " +
			"gonixl.failed_transfers=1, gonixl.failed_notifications=1, gonixl.failed_handshakes=1",
		"KV Transfer metrics: Num successful transfers=1, Avg xfer time (ms)=10.0, P90 xfer time (ms)=10.0, " +
			"Avg post time (ms)=0.5, P90 post time (ms)=0.5, Avg MB per transfer=1.0, Throughput (MB/s)=100.0, " +
			"Avg number of descriptors=1.0, Num failed transfers=0, Num KV expired reqs=0, Num notifs after expiry=0, " +
			"gonixl.registrations_received=1",
		"KV Transfer metrics: Num successful transfers=0, Avg xfer time (ms)=0, P90 xfer time (ms)=0, " +
			"Avg post time (ms)=0, P90 post time (ms)=0, Avg MB per transfer=0, Throughput (MB/s)=0, " +
			"Avg number of descriptors=0, Num failed transfers=0, Num KV expired reqs=1, Num notifs after expiry=0",
	}, got)
	// The fields carry the same keys and the interval's values.
	m := logs.All()[1].ContextMap()
	assert.Equal(t, uint64(1), m["Num successful transfers"])
	assert.Equal(t, 10.0, m["Avg xfer time (ms)"])
	assert.Equal(t, uint64(0), m["Num failed transfers"])
	assert.Equal(t, uint64(1), m["gonixl.registrations_received"])
	assert.NotContains(t, m, "gonixl.failed_transfers", "did not move in this interval")
}

// A rank that has counted nothing logs nothing: no all-zero line at start,
// however many counters and KV-cache groups it registered.
func TestNoLineAtStart(t *testing.T) {
	s := New()
	s.Counter("registrations_received", "PUSH_REG notifications received.")
	s.SetGroups([]string{"full", "sliding_window"})
	l, logs := newTestLogger(s)
	l.tick()
	l.tick()
	assert.Zero(t, logs.Len(), "lines: %v", logs.All())
}

// The tags are the logger's fields, each once.
func TestLineTags(t *testing.T) {
	s := New()
	s.RecordTransfer(mib, 1, time.Millisecond)
	core, logs := observer.New(zap.InfoLevel)
	l := newIntervalLogger(zap.New(core), s, zap.String("engine_id", "e1"), zap.Int("tp_rank", 3), zap.String("role", "decode"))
	l.tick()
	require.Equal(t, 1, logs.Len())
	n := 0
	for _, f := range logs.All()[0].Context {
		if f.Key == "tp_rank" {
			n++
		}
	}
	assert.Equal(t, 1, n)
	assert.Equal(t, "e1", logs.All()[0].ContextMap()["engine_id"])
}

// The line and Stats (and so /metrics) agree by sums: over the lines, each
// count adds up to the since-start counter.
func TestLinesSumToStats(t *testing.T) {
	s := New()
	reg := s.Counter("registrations_received", "PUSH_REG notifications received.")
	l, logs := newTestLogger(s)
	for i := 1; i <= 5; i++ {
		for range i {
			s.RecordTransfer(4096, 1, time.Millisecond)
		}
		s.FailedHandshakes.Add(uint64(i % 2))
		s.ExpiredRequests.Add(uint64(i % 3))
		reg.Add(uint64(i))
		l.tick()
	}
	sums := map[string]uint64{}
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			if n, ok := v.(uint64); ok {
				sums[k] += n
			}
		}
	}
	snap := s.Snapshot()
	assert.Equal(t, snap.Transfers, sums["Num successful transfers"])
	assert.Equal(t, snap.FailedTransfers+snap.FailedHandshakes+snap.FailedNotifications, sums["Num failed transfers"])
	assert.Equal(t, snap.ExpiredRequests, sums["Num KV expired reqs"])
	v, _ := snap.Get("registrations_received")
	assert.Equal(t, v, sums["gonixl.registrations_received"])
	assert.Equal(t, uint64(15), sums["Num successful transfers"])
}
