// Package stats counts what a connector does — transfers, bytes,
// descriptors, failures, expiries, bad input — and times transfers and their
// posting. A Set holds the counters both connectors share as fields and lets
// a connector register its own by name (pull's hold and pin counters,
// push's registration counters, the staging counters); Snapshot copies
// everything into a plain struct, which connector.Stats exports to users
// (counts since start). The periodic "KV Transfer metrics:" log line
// reports one interval at a time, as vLLM's does: each counter's increase
// since the last line, and the transfers of the interval.
package stats
