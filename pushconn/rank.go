package pushconn

import (
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/stats"
)

func logger(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}

// startStatsLog starts the periodic metrics line when a logger is set.
func startStatsLog(cfg RankConfig, log *zap.Logger, s *stats.Set) func() {
	if cfg.Logger == nil || cfg.StatsInterval < 0 {
		return func() {}
	}
	return stats.StartLogger(log, cfg.StatsInterval, s)
}
