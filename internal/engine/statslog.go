package engine

import (
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gonixl/gonixl/internal/stats"
)

// StartStatsLog starts a rank's periodic "KV Transfer metrics:" line,
// tagged with the engine, rank and role, and returns the function that
// stops it. With no logger, a logger that drops Info lines (the default
// no-op one), or a non-positive interval it starts nothing.
func StartStatsLog(log *zap.Logger, interval time.Duration, s *stats.Set, engineID string, rank int, role string) (stop func()) {
	if log == nil || !log.Core().Enabled(zapcore.InfoLevel) {
		return func() {}
	}
	return stats.StartLogger(log, interval, s,
		zap.String("engine_id", engineID), zap.Int("tp_rank", rank), zap.String("role", role))
}
