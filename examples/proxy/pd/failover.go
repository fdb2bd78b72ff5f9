package pd

import (
	"net/http"
)

// Decode failover: a decode leg is retried once on another decode engine only when the
// decode engine it went to did not take the request in, so that no KV of it was read:
//
//   - the connection could not be made (isDialError): the request never left the proxy;
//   - decode answered 503 before any byte of its answer (decodeRefused).
//
// Anything else is not retried on another decode engine: a connection that breaks after
// the request was sent, a timeout, a 500, a stream cut off. By then decode may have posted
// its READs: with pull, a finished READ releases the prefill engine's hold, whose blocks may
// already hold another request's KV, so a second decode engine would read the wrong bytes
// or fail; with push, prefill may be writing into the first decode engine's blocks. (Pull's
// 5xx still goes to a new prefill leg on another prefill engine, which makes the KV anew.)
//
// Why a 503 means "not taken in": the reference engine (examples/engine/server) answers 503
// only before a request has KV blocks, so before a READ can be posted: "engine closing"
// (it drains: checked before the request is parsed, or the loop is gone), "engine
// overloaded: too many requests waiting" (refused when queued) and "no KV blocks within the
// request timeout" (it waited in the queue; with pull its KeepAlive kept prefill's hold, and
// the abort that ends it leaves the hold alone). Once a request has blocks its failures are
// 500s ("KV transfer failed", "KV hand-off failed"), and its stream, once started, is 200.
// At shutdown the 503s of requests in flight are never written: the handlers are gone by
// then, and the client sees the connection close. The proxy relies on this contract: an
// engine that answers 503 after it read KV must not be put behind it.
//
// A 503 does not take the engine out of rotation (an engine that is full says so per
// request, and one that drains fails GET /health at the next check).

// decodeRefused says whether decode's status, sent before any byte of its answer, means it
// did not take the request in.
func decodeRefused(status int) bool { return status == http.StatusServiceUnavailable }
