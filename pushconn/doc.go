// Package pushconn is the push connector: the decode engine registers its
// destination blocks with the prefill engine as soon as it allocates them,
// and the prefill rank that finishes the request WRITEs its KV blocks
// straight into decode's memory, the way vLLM's NixlPushConnector does.
// Compared with pull (package pullconn) the transfer starts the moment
// prefill ends, without a round trip through the proxy and decode's
// scheduler.
//
// The package registers itself as connector's "push" driver: an engine that
// imports it picks it with EngineConfig.Connector and drives it through
// connector.Producer and connector.Consumer (docs/engine.md), whose Load is
// Register and whose Request carries the transfer id and token count. A
// Config field marked for one side is refused by the other.
//
// Both engines create a connector.Engine with NewEngine (their side channel
// and handshake client, in push mode); every TP rank then runs, with its own
// NIXL agent, a Consumer on decode or a Producer on prefill, configured by a
// Config: connector.RankConfig (what both connectors share) and what only
// push has. A pipeline-parallel prefill runs a Producer per TP rank of
// every stage (docs/push-protocol.md: Pipeline-parallel prefill). Coordinates(prefill engine) is what the proxy hands decode
// before prefill runs.
//
// Decode: Consumer.Register(id, prefill coordinates, block ids) returns at
// once. In the background the rank handshakes with the prefill engine
// (notification-only: it loads the metadata of the prefill ranks that write
// into it, descriptors.Sources) and sends each of them a PUSH_REG
// notification, "PUSH_REG:" + msgpack map, in exactly the wire format of
// testdata/push_reg.json (keys request_id, decode_engine_id, decode_host,
// decode_port, decode_tp_size, local_block_ids, remote_engine_id,
// remote_host, remote_port, remote_tp_size, remote_pp_size, optional
// transfer_id), plus our own optional decode_incarnation (docs/push-protocol.md: Restarts),
// registration_seq (docs/push-protocol.md: Registrations of the same id) and staging (a slot
// decode offers, see connector.Staging). The request is done when every one
// of those ranks has sent its completion
// "<decode request id>:<prefill world size>" (the WRITE's notification,
// which arrives after the data; with the registration's seq, see
// Completions); it fails at once on a PUSH_FAIL from
// any of them, with ErrRegistrationTimeout when the registration timeout
// (default 480 s) passes, and with connector.ErrAborted when the engine
// calls Consumer.Abort; when it fails it tells the other ranks with
// PUSH_CANCEL. Drain returns each request's connector.Result exactly once,
// and only when no prefill rank can still write into its blocks (docs/push-protocol.md: Write
// safety). A Register whose prefill TP or PP size differs from the prefill
// engine's handshake fails with an error matching connector.ErrInvalid that
// names the field and both values; it fails only that request.
//
// Prefill: Producer.RequestFinished(id, block ids) holds the blocks and
// returns the Params. The rank's writer goroutine (the shared
// poller) pairs registrations with finished requests in either order — by
// transfer_id when both carry one, else by exact request id, else by the
// ids with a trailing "-" and 8 hex digits stripped — so each request is
// written once per decode rank it feeds (descriptors.Targets); duplicate
// registrations are counted and dropped. On the first registration from a
// decode engine it handshakes with that engine's side channel in the
// background, holding only that engine's registrations. It maps both
// layouts' block ids with descriptors.MapCoalesced (TP sizes and block
// sizes may differ), posts the WRITE with the completion notification,
// polls it, and frees the blocks (DrainFreed) when every WRITE has ended.
// Finished blocks that no registration claims are freed when their lease
// (default 30 s) ends, and a registration that arrives after that (the
// rank remembers the last 4096 such requests) gets PUSH_FAIL "expired" at
// once when no live finished request pairs with it and it names the lapsed
// request itself (its transfer id, or its exact request id); one that
// matches a lapsed request only by stripped id may be an early
// registration of a retry and waits as usual. A request that finishes
// makes the rank forget the lapsed requests it would pair with (same
// transfer id or same stripped id). Registrations whose request never finishes expire
// after the registration timeout. The writer polls every millisecond only
// while finished blocks wait for a registration or WRITEs are in flight;
// otherwise it sleeps until woken by a registration, a finished request, an
// engine step (DrainFreed) or a finished handshake, still progressing its
// agent at the idle period (50 ms) as the native agent needs.
//
// Progressive push: Producer.Progress(id, block ids, tokens), while the
// engine still prefills the request, reports its first blocks final in
// every layer; the writer WRITEs them at once into the registrations
// waiting for it, without a completion, and the rest at RequestFinished
// with it, so decode sees no difference (connector.ProgressReporter,
// docs/push.md).
//
// A push engine paired with a pull engine is refused at the handshake, on
// either side, with an error naming both modes (connector.ErrIncompatible).
//
// The rules in full — pipeline-parallel prefill, PUSH_FAIL, PUSH_CANCEL,
// write safety, registrations of the same id, completions, registrations
// without a seq, abort, restarts, limits, vLLM's protocol and metrics — are
// in docs/push-protocol.md; how it is built and configured in docs/push.md.
package pushconn
