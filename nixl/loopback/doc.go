// Package loopback is an in-process implementation of [nixl.Agent] written
// in pure Go, for testing code that moves memory over NIXL without GPUs and
// without NIXL installed, the way net/http/httptest stands in for a network.
//
// Agents live on a [Fabric], a value that plays the network: agents find
// each other through it by name once they have loaded each other's metadata,
// and READ and WRITE copy real bytes between memory registered from
// [nixl.Buffer]s. A transfer's notification reaches its target only after
// the transfer's bytes are in place. How long transfers take is set by a
// [TransferModel] (instant, a fixed latency, or a link bandwidth plus
// latency), measured on an injectable clock ([Clock]; tests step a
// connector.ManualClock, the one their connectors take). Faults — dropped or
// delayed notifications, failed posts, transfers failing in flight,
// disconnected agents — are injected per fabric or per agent pair,
// deterministically from a seed, and counted.
//
// Like a NIXL agent without a progress thread, a fabric has no goroutines of
// its own: transfers and notifications that are due are carried out whenever
// an agent of the fabric is polled (GetNotifs, XferStatus, PostXferReq,
// ReleaseXferReq). As with NIXL's UCX backend, the notification of a
// transfer that did not complete inside PostXferReq leaves only when the
// initiator sees the transfer done, so an initiator must poll its requests.
// Once ReleaseXferReq (or the agent's Close) returns, no byte of the
// request is written any more, even when another goroutine was copying it:
// the copy stops at its next descriptor run and the release waits for it,
// so the memory of a released request can be handed back at once.
// The errors returned are those of NIXL's nixlAgent for the same
// mistakes, as [*nixl.Error] values that match nixl's sentinel errors; the
// differences from the native agent are listed in docs/loopback.md and on
// the methods concerned.
package loopback
