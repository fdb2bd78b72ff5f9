package pushconn

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/stats"
)

// publishRank registers the rank's KV memory with its agent and publishes
// the agent's metadata and layout on the engine's side channel.
func publishRank(e *Engine, cfg RankConfig) error {
	if err := cfg.Agent.RegisterMem(cfg.Layout.RegList(), nil); err != nil {
		return fmt.Errorf("pushconn: register KV memory of rank %d: %w", cfg.Layout.TPRank, err)
	}
	md, err := cfg.Agent.LocalMD()
	if err == nil {
		err = e.core.Server().SetRank(handshake.Rank{TPRank: cfg.Layout.TPRank, Agent: cfg.Agent.Name(), Metadata: md, Layout: cfg.Layout})
	}
	if err != nil {
		_ = cfg.Agent.DeregisterMem(cfg.Layout.RegList(), nil)
		return fmt.Errorf("pushconn: publish rank %d: %w", cfg.Layout.TPRank, err)
	}
	return nil
}

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
