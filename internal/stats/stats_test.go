package stats

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecordAndSnapshot(t *testing.T) {
	s := New()
	s.RecordTransfer(1000, 2, 10*time.Millisecond)
	s.RecordTransfer(3000, 4, 30*time.Millisecond)
	s.RecordPost(time.Millisecond)
	s.FailedTransfers.Inc()
	s.ExpiredRequests.Add(3)
	snap := s.Snapshot()
	assert.Equal(t, uint64(2), snap.Transfers)
	assert.Equal(t, uint64(4000), snap.Bytes)
	assert.Equal(t, uint64(6), snap.Descriptors)
	assert.Equal(t, uint64(1), snap.FailedTransfers)
	assert.Equal(t, uint64(3), snap.ExpiredRequests)
	assert.Equal(t, 20*time.Millisecond, snap.XferTime.Mean)
	assert.Equal(t, 30*time.Millisecond, snap.XferTime.P90)
	assert.Equal(t, uint64(1), snap.PostTime.Count)
	assert.Empty(t, snap.Extra)
}

func TestExtraCounters(t *testing.T) {
	s := New()
	reg := s.Counter("registrations_received", "PUSH_REG notifications received.")
	assert.Same(t, reg, s.Counter("registrations_received", "ignored"), "same name, same counter")
	s.Counter("push_fail_sent", "PUSH_FAIL notifications sent.").Add(2)
	reg.Inc()
	snap := s.Snapshot()
	require.Len(t, snap.Extra, 2)
	assert.Equal(t, CounterValue{Name: "registrations_received", Help: "PUSH_REG notifications received.", Value: 1}, snap.Extra[0])
	v, ok := snap.Get("push_fail_sent")
	assert.True(t, ok)
	assert.Equal(t, uint64(2), v)
	_, ok = snap.Get("transfers")
	assert.False(t, ok, "shared counters are fields, not Extra")
	assert.Contains(t, snap.LogLine(), " registrations_received=1 push_fail_sent=2")
}

func TestLogLine(t *testing.T) {
	s := New()
	s.RecordTransfer(2_000_000, 3, 4*time.Millisecond)
	s.LateNotifications.Inc()
	line := s.Snapshot().LogLine()
	assert.True(t, strings.HasPrefix(line, "KV Transfer metrics: transfers=1 avg_xfer_ms=4.000 p90_xfer_ms=4.000"), line)
	assert.Contains(t, line, "avg_mb_per_transfer=2.000 throughput_mb_s=500.0 avg_descriptors=3.0")
	assert.Contains(t, line, "late_notifications=1")
}

func TestStartLoggerLogsOnlyChanges(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s := New()
	s.Transfers.Inc()
	stop := StartLogger(zap.New(core), time.Millisecond, s, zap.String("engine_id", "e1"))
	require.Eventually(t, func() bool { return logs.Len() >= 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // nothing changes: no second line
	assert.Equal(t, 1, logs.Len())
	s.FailedHandshakes.Inc()
	require.Eventually(t, func() bool { return logs.Len() == 2 }, 5*time.Second, time.Millisecond)
	stop()
	stop()
	e := logs.All()[1]
	assert.True(t, strings.HasPrefix(e.Message, "KV Transfer metrics: transfers=1 "))
	assert.Contains(t, e.Message, "failed_handshakes=1")
	assert.Equal(t, "e1", e.ContextMap()["engine_id"])
	// Every figure of the line is a field too.
	assert.Equal(t, uint64(1), e.ContextMap()["transfers"])
	assert.Equal(t, uint64(1), e.ContextMap()["failed_handshakes"])
	assert.Equal(t, uint64(0), e.ContextMap()["malformed_frames"])
	assert.Contains(t, e.ContextMap(), "avg_xfer_ms")
}

func TestStartLoggerNilIsNoop(t *testing.T) {
	StartLogger(nil, time.Second, New())()
}
