// Package lease keeps the deadlines of held KV blocks: blocks that a
// producer holds for a consumer are leased, heartbeats extend the lease,
// completion ends it, and Expire hands back, exactly once, the ids whose
// lease ran out. The table is a pure state machine: time comes in as an
// argument (read from a Clock at the edges), so tests step it
// deterministically.
package lease
