// Package notif encodes and decodes the short NIXL notification messages
// that the connectors exchange: the completion message "<request id>:<n>"
// that a transfer carries to the engine that owns the blocks, and the
// heartbeat "HB:<id>,<id>,..." that extends the leases of requests still
// waiting for their transfer. The decoders are strict: they read bytes that
// came from the network, so every malformed message gives an error that says
// what is wrong and nothing panics.
//
// # Completions that name their registration
//
// A push completion answers one registration, and the same request id may
// be registered again once the first request ended; a late, duplicated
// copy of the first one's completion must not count for the second. So the
// push connector's prefill appends the registration's registration_seq
// when the registration carried one:
//
//	"<request id>:<n>#<seq>"   seq in decimal, 1..2^64-1, no leading zero
//
// and sends the plain "<request id>:<n>" otherwise (vLLM's decode sends no
// seq and parses only that form). A pull completion to a gonixl prefill
// that pins its holds names the hold it read the same way, with the hold's
// key in place of the seq; to any other prefill it is plain
// (DecodeCompletion refuses a tail; DecodeSeqCompletion reads both forms).
//
// Why '#' after the count: a vLLM decoder splits at the last ':' and
// reads the rest with Python's int(), which accepts surrounding whitespace,
// a sign and '_' between digits but nothing else, so it refuses "<n>#<seq>"
// rather than count the message; and since the split is at the last ':',
// the id part it sees is the true id, never another request's (a
// "<id>:<n>:<seq>" form would read as a completion of request "<id>:<n>").
// Our decoder finds the last ':' as before — the id may hold ':' and '#' —
// and everything after it is digits, optionally '#' and digits, which
// splits one way only.
package notif
