// Package stats counts what a connector does — transfers, bytes,
// descriptors, failures, expiries, bad input — and times transfers and their
// posting. A Set holds the counters both connectors share as fields and lets
// a connector register its own (the push connector's registration counters)
// by name; Snapshot copies everything into a plain struct, which the periodic
// "KV Transfer metrics:" log line and the promstats collector read.
package stats
