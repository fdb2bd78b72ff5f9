package pushconn

import "github.com/gonixl/gonixl/metrics"

// Stats is a snapshot of a rank's or an Engine's counters and transfer
// times (see package metrics); the promstats package exports it to
// Prometheus. The push-specific counters are in Extra (see the package
// documentation, Metrics).
type Stats = metrics.Snapshot
