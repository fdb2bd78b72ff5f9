package pushconn

import (
	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/stats"
)

// statsOf returns a rank's counters as the public connector.Stats.
func statsOf(s *stats.Set) connector.Stats {
	return engine.Public.Stats(s.Snapshot()).(connector.Stats)
}
