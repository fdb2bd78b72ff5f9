package pd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"syscall"
)

// Decode failover: a decode leg is retried once on another decode engine only when the
// decode engine it went to did not take the request in, so that no KV of it was read:
//
//   - the connection could not be made (isDialError): the request never left the proxy;
//   - decode answered 503 before any byte of its answer (decodeRefused);
//   - the connection closed or was reset (EOF, ECONNRESET, EPIPE) before the engine said it
//     took the request in (closedBeforeTakenIn). The proxy asks every decode leg, with the
//     header TakenInHeader, to be told: the reference engine then answers "103 Early Hints"
//     with that header before its loop gets the request, so before any READ of it can be
//     posted. A decode engine that dies while the proxy keeps connections to it alive
//     answers the next request sent on one with EOF, and that request was never taken in.
//     Only an engine that has sent the 103 before (so the proxy knows it announces) is
//     failed over this way: from one that never does (vLLM), an EOF cannot be told from a
//     death after a READ, and is not retried elsewhere.
//
// Anything else is not retried on another decode engine: a connection that breaks after
// the request was taken in, a timeout, a 500, a stream cut off. By then decode may have posted
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

// TakenInHeader asks a decode engine, on a decode leg, to say with an informational 103
// answer carrying the same header when it takes the request in (before any KV of it is
// read); examples/engine/server answers it. An engine that ignores it is never failed over
// on a closed connection.
const TakenInHeader = "Gonixl-Taken-In"

// sendDecode sends a decode leg as send does, asking decode to say when it takes the
// request in; takenIn is set (before the response or error comes back) once it said so,
// and the engine is remembered as one that announces.
func (p *Proxy) sendDecode(ctx context.Context, c *completion, e *engine, path string, body []byte) (*http.Response, *atomic.Bool, error) {
	takenIn := new(atomic.Bool)
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusEarlyHints && h.Get(TakenInHeader) != "" {
			takenIn.Store(true)
			e.announces.Store(true)
		}
		return nil
	}}
	resp, err := p.sendWith(httptrace.WithClientTrace(ctx, trace), c, e, path, body, http.Header{TakenInHeader: {"1"}})
	return resp, takenIn, err
}

// closedBeforeTakenIn says whether a decode leg that ended in err, with no answer, was
// never taken in by e: its connection closed or was reset before e said it took the
// request in, and e says so for every request (it announced one before).
func closedBeforeTakenIn(e *engine, takenIn *atomic.Bool, err error) bool {
	return !takenIn.Load() && e.announces.Load() && connClosed(err)
}

// connClosed says whether err is the connection closing or being reset under a request,
// not a timeout, a cancellation or a refused dial.
func connClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection")
}
