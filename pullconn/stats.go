package pullconn

import "github.com/gonixl/gonixl/internal/stats"

// Stats is a snapshot of a connector's counters and transfer times; the
// promstats package exports it to Prometheus. Decode ranks count transfers,
// bytes, descriptors, failed transfers, handshakes and notifications;
// prefill ranks count expired requests and unknown, late and malformed
// notifications; an Engine counts malformed side-channel frames and refused
// handshakes.
type Stats = stats.Snapshot
