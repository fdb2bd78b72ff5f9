// Package discovery keeps the membership of a disaggregated serving stack in
// etcd: every engine publishes a Record under
// /gonixl/<cluster>/engines/<role>/<engine_id> on a lease it keeps alive
// (Register), and proxies watch the prefix (Watch) to route across every
// live engine. A graceful shutdown deletes the key; a killed engine's key
// vanishes when its lease expires, a TTL after its last keep-alive.
//
// The values are JSON (Record); a value that does not decode, or whose role
// and engine id disagree with its key, is skipped and counted, never routed
// to.
package discovery
