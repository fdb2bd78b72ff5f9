// Package pullconn is the pull connector: the decode engine READs the KV
// blocks that the prefill engine computed, the way vLLM's NixlConnector does.
//
// What both connectors share (the Engine, its configuration with the KV
// geometry, the RankConfig every rank takes, Result, Stats, Staging, the
// errors) is in package connector; NewEngine makes a pull engine, and Config
// adds what only pull has to connector.RankConfig. The package registers
// itself as connector's "pull" driver: an engine that imports it picks it
// with EngineConfig.Connector and drives it through connector.Producer and
// connector.Consumer (docs/engine.md), as the calls below do. A Config field
// marked for one side is refused by the other.
//
// Prefill: every TP rank runs a Producer with its own NIXL agent; the ranks
// of one engine share a connector.Engine from NewEngine, whose side channel
// serves all their agents' metadata and KV layouts at one address. When a
// request finishes prefill, the engine calls RequestFinished on every rank
// with the request's block ids; the blocks stay held and leased (30 s by
// default) and every rank returns the same Params, which travel to decode
// through the proxy as vLLM's kv_transfer_params. A rank frees a request's
// blocks once every decode rank that reads from it has sent its completion
// notification ("<request id>:<decode TP size>", from a gonixl decode
// followed by "#<hold key>", the hold it read), or when the lease expires
// and no decode engine pinned the hold; heartbeats "HB:<id>,..." from decode
// extend the lease. DrainFreed hands those ids to the engine without
// blocking. An engine going away calls DropHolds: the holds no decode rank
// is reading are released at once instead of at their lease, and a decode
// engine that comes for one is told on that contact (its pin is answered
// "it dropped the hold: <why>", and its load fails with ErrNotHeld); a
// prefill engine has no other way to reach a decode engine (NIXL notifies
// only agents whose metadata was loaded, and pull's prefill loads none).
//
// Decode: every TP rank runs a Consumer with its own agent. Load(id, params,
// local block ids) returns at once: a background reader goroutine handshakes
// with the prefill engine (once per engine, at most one in flight), maps the
// blocks to descriptors for each prefill rank this rank reads from
// (descriptors.Sources; TP sizes and block sizes may differ), posts the
// READs, asks prefill to pin the hold for as long as the READs may run,
// polls them and queues the result, which Drain returns: done only if every
// prefill rank pinned exactly the hold the Params name and the READs ended
// within the pin (else ErrNotHeld; see docs/pull.md and
// docs/correctness.md). To a prefill that pins, the completion goes once
// the load is done and names the hold; to one that does not (vLLM's), the
// READs carry it. A prefill rank in gonixl's protocol therefore refuses a
// plain completion that names no hold (refused_plain_completions): it
// comes from no decode reading it. With Config.Inline the mapping and posting run on the caller
// instead, as in vLLM today; that mode exists to measure the difference. An
// empty local block list (decode already holds every block) sends the
// completion notifications only.
//
// Bidirectional KV (vLLM's bidirectional_kv_xfer), for multi-turn chats:
// the same protocol run from decode to prefill (D->P). A decode rank runs a
// HistoryExporter (a Producer) beside its Consumer; when a turn finishes,
// ExportTurn holds its full blocks for DefaultDecoderKVBlocksTTL (480 s)
// and returns Params that the proxy passes to the next turn's prefill. A
// prefill rank runs a HistoryReader (a Consumer) beside its Producer;
// LoadHistory reads the history back into the prefill's own blocks, or,
// below the recompute threshold (DefaultKVRecomputeThreshold, 64 tokens),
// sends only the completions so that decode frees the blocks and prefill
// recomputes. The reader declines a hold that ends within
// 5 s on its clock, as vLLM does. Leases,
// heartbeats, hold queries, pins, abort, the read guard and the
// exactly-once end are those of the P->D direction, by the same code.
// Each role of a rank has its own NIXL agent over the rank's memory, so
// that closing one role takes only its registration away.
//
// Every request ends exactly once: done, or failed with an error that says
// why (and, under the recompute policy, which local blocks hold no valid
// data). Every wait has a deadline: the handshake timeout, the transfer
// timeout, the lease. Close stops every goroutine the package started.
package pullconn
