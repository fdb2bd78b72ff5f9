package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/internal/stats"
)

func TestStartStatsLogTagsTheLine(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s := stats.New()
	s.RecordTransfer(4096, 2, time.Millisecond)
	stop := StartStatsLog(zap.New(core), 5*time.Millisecond, s, "prefill-0", 3, "prefill")
	deadline := time.Now().Add(5 * time.Second)
	for logs.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	require.NotZero(t, logs.Len(), "no metrics line within 5 s")
	e := logs.All()[0]
	require.True(t, strings.HasPrefix(e.Message, "KV Transfer metrics:"), "line %q", e.Message)
	m := e.ContextMap()
	require.Equal(t, "prefill-0", m["engine_id"])
	require.Equal(t, int64(3), m["tp_rank"])
	require.Equal(t, "prefill", m["role"])
	require.Equal(t, uint64(1), m["Num successful transfers"], "the figures are fields too")
}

// With no logger, or one that drops Info lines, no goroutine is started
// (TestMain's goleak check would see one left running after a missed stop).
func TestStartStatsLogIdleWithoutALogger(t *testing.T) {
	s := stats.New()
	s.RecordTransfer(1, 1, time.Millisecond)
	for _, log := range []*zap.Logger{nil, zap.NewNop(), zap.New(zapcore.NewNopCore())} {
		_ = StartStatsLog(log, time.Millisecond, s, "e", 0, "decode") // never stopped on purpose
	}
	core, logs := observer.New(zapcore.WarnLevel)
	_ = StartStatsLog(zap.New(core), time.Millisecond, s, "e", 0, "decode")
	time.Sleep(20 * time.Millisecond)
	require.Zero(t, logs.Len())
}
