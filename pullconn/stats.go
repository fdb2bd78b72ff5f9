package pullconn

import "github.com/gonixl/gonixl/metrics"

// Stats is a snapshot of a connector's counters and transfer times (see
// package metrics); the promstats package exports it to Prometheus. Decode
// ranks count transfers, bytes, descriptors, failed transfers, handshakes
// and notifications, expired, aborted and rejected loads, KeepAlive timeouts,
// hold queries and stuck transfers; prefill ranks count expired and aborted
// requests and unknown, late and malformed notifications; an Engine counts
// malformed side-channel frames and refused handshakes.
type Stats = metrics.Snapshot
