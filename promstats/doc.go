// Package promstats exports a gonixl connector's statistics to Prometheus,
// with metric names following vLLM's NIXL connector metrics
// (nixl_xfer_time_seconds, nixl_num_failed_transfers_total, ...). It is the
// only gonixl package that imports the Prometheus client, so programs that do
// not use Prometheus never link it.
package promstats
