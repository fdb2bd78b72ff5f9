// Package latency records durations and reports their mean and percentiles.
// Recorder keeps every sample (benchmarks, where exact p50/p99 matter);
// Window keeps the most recent samples in fixed memory (runtime stats, which
// run forever). Both connectors and their benchmarks use it, so push and
// pull figures are computed the same way.
package latency
