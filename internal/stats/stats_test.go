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
}

// StartLogger's goroutine ends an interval on each tick, and stop waits
// for it: a tick received before stop has been logged when stop returns.
func TestStartLoggerTicks(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s := New()
	s.RecordTransfer(1<<20, 1, time.Millisecond)
	ticks := make(chan time.Time) // unbuffered: a send returns once the goroutine took it
	released := 0
	stop := startLogger(newIntervalLogger(zap.New(core), s, zap.String("engine_id", "e1")), ticks, func() { released++ })
	ticks <- time.Time{}
	ticks <- time.Time{} // an empty interval: no line
	stop()
	stop()
	require.Equal(t, 1, logs.Len())
	assert.Equal(t, 1, released, "the ticker is stopped once")
	e := logs.All()[0]
	assert.True(t, strings.HasPrefix(e.Message, "KV Transfer metrics: Num successful transfers=1, "), e.Message)
	assert.Equal(t, "e1", e.ContextMap()["engine_id"])
}

func TestStartLoggerNilIsNoop(t *testing.T) {
	StartLogger(nil, time.Second, New())()
}
