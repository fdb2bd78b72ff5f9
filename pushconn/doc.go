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
// every stage (see Pipeline-parallel prefill). Coordinates(prefill engine) is what the proxy hands decode
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
// transfer_id), plus our own optional decode_incarnation (see Restarts),
// registration_seq (see Registrations of the same id) and staging (a slot
// decode offers, see connector.Staging). The request is done when every one
// of those ranks has sent its completion
// "<decode request id>:<prefill world size>" (the WRITE's notification,
// which arrives after the data; with the registration's seq, see
// Completions); it fails at once on a PUSH_FAIL from
// any of them, with ErrRegistrationTimeout when the registration timeout
// (default 480 s) passes, and with connector.ErrAborted when the engine
// calls Consumer.Abort; when it fails it tells the other ranks with
// PUSH_CANCEL. Drain returns each request's connector.Result exactly once,
// and only when no prefill rank can still write into its blocks (see Write
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
// # Pipeline-parallel prefill
//
// A prefill engine whose EngineConfig.Geometry has PPSize n > 1 runs n
// stages of TP ranks; each rank's Layout is its stage's
// (descriptors.Geometry.StageLayout: PPRank, PPSize, and the stage's
// contiguous layers FirstLayer .. FirstLayer+NumLayers-1 of ModelLayers),
// and it registers and publishes that stage's KV memory only. The
// handshake payload lists every rank stage by stage (world rank
// pp rank * TP size + TP rank), and a payload whose stages do not cover
// the model's layers exactly once, in order, is refused. Decode is never
// pipeline-parallel (a Consumer of a stage layout is refused): each decode
// rank sends PUSH_REG (remote_pp_size n) to the ranks of every stage that
// feed it — descriptors.Sources within each stage — and counts one
// completion per such rank, n x len(Sources) of them, which is vLLM's
// pp_size * max(1, prefill TP / decode TP). Each stage's Producer pairs
// the registration with its own RequestFinished (stages may finish at
// different times, and each writes as soon as its own has), maps its
// layers onto decode's same model layers (descriptors.MapCoalesced moves
// only the layers both hold; TP sizes and block sizes may differ, MLA or
// not) and notifies "<id>:<TP size>#<seq>" (the number is the TP size
// with or without stages, as vLLM's world size is its TP group's). A stage that fails sends
// PUSH_FAIL naming its world rank; the write-safety rule below holds rank
// by rank, so decode hands the blocks back only once every rank of every
// stage that got the registration has written, failed or acknowledged
// the cancel. Coordinates and Params carry the PP size (pp_size); a
// registration whose remote_pp_size is not the engine's gets PUSH_FAIL
// "layout". Not supported with a stage: staging (RankConfig.Staging.Mode
// must be off), KV-cache groups, and vLLM's protocol (NewEngine refuses
// Geometry.PPSize > 1 there, naming the field).
//
// # PUSH_FAIL
//
// vLLM never tells decode that a WRITE failed to post, so decode waits for
// its registration timeout. This connector closes that gap: whenever a
// prefill rank will not write a registered request it sends the decode
// rank that registered it
//
//	"PUSH_FAIL:" + msgpack map {
//	    "request_id":  str,  decode's request id, from the registration
//	    "transfer_id": str,  the registration's transfer id; only when it had one
//	    "engine_id":   str,  the prefill engine id
//	    "rank":        int,  the prefill rank (pp rank * TP size + TP rank), >= 0
//	    "kind":        str,  the step that failed (below)
//	    "reason":      str,  what went wrong, for people; at most 1024 bytes
//	    "registration_seq": uint, the failed registration's; only when it had one
//	}
//
// with the keys in that order and the most compact msgpack encodings, like
// PUSH_REG. Kinds: "handshake" (the decode engine's side channel could not
// be used), "layout" (the registration or the layouts do not map: other TP
// size, several KV-cache groups, block lists of the wrong length, a rank
// that does not write into the sender), "post" (the WRITE could not be
// created or posted, or the completion of an empty registration could not
// be sent), "transfer" (the WRITE failed in flight or outlived the write
// timeout and was cancelled), "expired" (the request did not finish on
// prefill within the registration timeout) and "closed" (the Producer was
// closed first) and "overloaded" (the rank refused the registration at
// its MaxPeers or MaxPendingRegistrations limit) and "aborted" (the
// prefill engine aborted the request, Producer.Abort); "expired" also answers a
// registration that arrives after its request's lease ran out. Decoders must accept unknown kinds and skip unknown keys;
// the other keys are required. Decode ends the request with a *PushError
// (errors.Is(err, ErrPushFailed)). A PUSH_FAIL can only reach a decode rank
// whose metadata prefill has loaded, so a failed handshake with the decode
// engine is reported only by decode's own timeout
// (push_fail_undeliverable counts these).
//
// # PUSH_CANCEL
//
// When decode ends a request other than by success — its registration
// timeout, a PUSH_FAIL from one of several prefill ranks, a PUSH_REG that
// reached some ranks but not another, or Consumer.Close — the other prefill
// ranks may still hold the registration and would WRITE into blocks the
// engine reuses. Decode therefore sends every prefill rank that got the
// registration and has neither written nor failed it
//
//	"PUSH_CANCEL:" + msgpack map {
//	    "request_id":  str,  decode's request id, as in the registration
//	    "transfer_id": str,  the registration's transfer id; only when it had one
//	    "engine_id":   str,  the decode engine id
//	    "rank":        int,  the decode TP rank, >= 0
//	    "registration_seq": uint, the registration's; only when it had one
//	}
//
// with the keys in that order and the most compact msgpack encodings.
// Decoders must skip unknown keys; transfer_id and registration_seq are
// optional, the others required. Prefill identifies the registration by the
// notification's sender agent, request_id and transfer_id. A registration
// still waiting for its request leaves the matcher, so it never takes the
// match of a live registration (a retry of the request, or the same id
// registered again); the rank remembers it (the last 4096, each until
// prefill's registration timeout) so that its request, when it finishes,
// names it (same transfer id, or same exact request id) and no live
// registration pairs with it, is freed at once, with no WRITE and no lease
// wait (a request that pairs with it only by stripped id may be a retry
// whose registration is still on its way: it waits as usual). One waiting
// for a handshake or for a retry is dropped. Prefill answers every
// PUSH_CANCEL with
//
//	"PUSH_CANCEL_ACK:" + msgpack map {
//	    "request_id":  str,  the cancel's request_id
//	    "transfer_id": str,  the cancel's transfer_id; only when it had one
//	    "engine_id":   str,  the prefill engine id
//	    "rank":        int,  the prefill rank, >= 0
//	    "registration_seq": uint, the cancel's; only when it had one
//	}
//
// (keys in that order, most compact encodings; decoders skip unknown keys,
// transfer_id and registration_seq are optional, the others required; every
// id is at most 1024 bytes) once no WRITE of that registration can land any
// more: at once when it was withdrawn, dropped, already written or failed,
// or never received; after the handshake with the decode engine when it
// waited for one; and when its WRITE ends (completed, failed, or cancelled
// at the write timeout) when one was in flight. Prefill's registration
// timeout defaults to 450 s, shorter
// than decode's 480 s, so that without a cancel prefill gives up first; keep
// prefill's shorter when configuring either side.
//
// # Write safety
//
// Decode hands a request's blocks back to the engine — Drain returns its
// connector.Result — only when no prefill rank can still write into them:
// every rank that was sent the registration has completed (its completion
// notification arrived, also when it comes after decode decided to fail the
// request), sent PUSH_FAIL, or acknowledged the PUSH_CANCEL. A done request
// meets this by definition. A failed, timed-out or aborted one drains: it
// ends at once (no completion counts for it, Abort returns), PUSH_CANCEL
// goes to every rank that has not answered, again every quarter of
// Config.CancelTimeout, and its connector.Result comes out when the last
// rank answers, or at CancelTimeout (default DefaultCancelTimeout, (2 x
// prefill's write timeout + 10 s) x 4/3, 93.3 s; counted in cancel_timeouts)
// if one never does. Until then Pending counts it and Register refuses its
// id. Consumer.Close publishes draining results after the rank's memory is
// deregistered, when no WRITE can land in it. Remaining risk: a prefill rank
// that is alive but lost every PUSH_CANCEL (or whose acks were all lost) and
// still holds the registration past CancelTimeout may WRITE into the
// released blocks later (its completion names the old registration's seq, so
// it counts for no newer request of the same id; from a decode that sends no
// seq it would). A crashed prefill rank sends nothing more, so it is no
// risk.
//
// A prefill rank found dead settles its requests before CancelTimeout: a
// notification to its agent failed with a disconnect or not-found error,
// and a fresh handshake with its engine's address was refused or showed
// another incarnation of the rank. Decode unloads the dead agent's
// metadata first, then fails its live requests with connector.ErrPrefillGone and
// releases the draining ones that waited only for it (prefill_gone; a
// warning per request names the request, the engine and the reason). A
// probe that answers the same incarnation, or fails otherwise, changes
// nothing. See docs/push.md, "Prefill restarts or dies".
//
// # Registrations of the same id
//
// Every PUSH_REG a decode rank sends carries one more optional key of our
// own, after decode_incarnation:
//
//	"registration_seq": uint  the registration's number among those this
//	                          rank instance sent (counting up from a random
//	                          start, so a restarted instance never repeats
//	                          the dead one's), 1..2^64-1, most compact
//	                          unsigned encoding; only when set
//
// PUSH_FAIL, PUSH_CANCEL and PUSH_CANCEL_ACK carry the same key, last, for
// the registration they are about: a cancel then withdraws only that
// registration, and decode ignores a failure or an acknowledgement whose
// seq is another registration's of the same id (a repeated or late answer
// about an earlier request), so it never releases or fails a newer one.
//
// Prefill drops a registration with the sender and ids (request_id,
// transfer_id) of one it holds or wrote within its registration timeout as
// a duplicate unless both carry a registration_seq and the seqs differ:
// then the same request id was registered again (the first request ended
// on decode), and the new registration replaces a waiting one
// (superseded_registrations) or is admitted after a written one.
//
// # Completions
//
// The completions name the registration they answer, too: for a
// registration that carried a registration_seq, prefill's WRITE notifies
//
//	"<decode request id>:<prefill world size>#<registration_seq>"
//
// (and the staged completions end the same way: "PUSH_STAGED:<id>:<n>#<seq>",
// "PUSH_STAGED_CHUNK:<c>:<k>:<id>:<n>#<seq>"); for one without (vLLM's
// decode sends none) it notifies the plain "<id>:<n>" that vLLM parses.
// The seq follows the count after '#' (package notif says why that form):
// a decoder that splits at the last ':' and parses an integer refuses it
// instead of counting it for another request id, and an id may still hold
// ':' and '#'. Decode counts a completion only when its seq is the one of
// the request id's registration it holds, live or draining: a completion
// with another registration's seq — a late, duplicated copy of an earlier
// request's of the same id — is counted in stale_completions, logged at
// debug and changes nothing, so it can neither end the newer request done
// over blocks no rank wrote nor release a draining one's blocks while a
// prefill rank may still write them. A completion without a seq for a
// registration that had one is stale as well: gonixl's prefill always
// echoes the seq, so such a message answers some other registration (or
// comes from a prefill that drops the key, and those requests end at their
// registration timeout). Against a decode that sends no seq the plain
// completion counts as before, and a duplicated one can still count for a
// newer request of the same id.
//
// # Registrations without a seq
//
// A registration without registration_seq (vLLM's decode sends none)
// cannot be told from a later one of the same id, so prefill remembers, per
// rank and until its registration timeout, the seq-less registrations it
// ended without a WRITE and told decode so — withdrawn for a PUSH_CANCEL it
// acknowledged, or refused with PUSH_FAIL (expired, after the lease,
// layout, handshake, overloaded) — by sender agent, request id, transfer id
// and block ids, and drops a later registration identical in all four
// (seqless_copies_dropped): decode took those blocks back, and a late copy
// of the registration would be written into them. A seq-less cancel of a
// registration the rank never received names no blocks: every seq-less
// registration of that sender and ids is then dropped until the timeout
// (registrations_cancelled_before_arrival). At most 65,536 entries are
// kept (a ring of 64-bit hashes, about 7 MiB; the oldest goes first).
// Copies of written registrations were already dropped by the matcher
// (its tombstones, for the same time). Still open against a decode that
// sends no seq: a copy that arrives after prefill's registration timeout
// (counted from the ending, or from the WRITE), or after the rank forgot
// the entry (more than 65,536 such endings within one timeout, or the
// prefill rank restarted), is admitted and may be written into reused
// blocks; a completion (plain "<id>:<n>"), PUSH_CANCEL or PUSH_CANCEL_ACK
// of an earlier registration of the id counts for a newer one; and a new
// registration identical to an ended one (same sender, ids and blocks),
// or any of a sender and id whose cancel came first, is dropped as a copy
// within the timeout and waits for decode's registration timeout, as a
// same-id registration after a WRITE already did (the matcher takes it
// for a duplicate).
//
// # Abort
//
// Consumer.Abort(id) ends a decode request at once with
// connector.ErrAborted; its connector.Result follows the write-safety rule.
// Producer.Abort(id) withdraws a finished request the engine dropped: no
// WRITE of it starts once Abort returned (Abort waits for a post in
// progress), matched registrations whose WRITE has not started get PUSH_FAIL
// "aborted", later ones PUSH_FAIL "expired", a WRITE in flight is left to
// end, and the blocks come out of DrainFreed once none is. Both are
// idempotent, return connector.ErrClosed after Close, and count
// aborted_requests.
//
// # Restarts
//
// A decode engine that restarts keeps its engine id, side-channel port and
// agent names, so a registration of the dead instance names the same
// agent as the new one, whose blocks belong to other requests. Every time
// a rank starts it draws a random non-zero 64-bit incarnation, which its
// handshake payload publishes (ranks[i].incarnation) and every PUSH_REG it
// sends carries as one more key, after the vLLM keys and transfer_id:
//
//	"decode_incarnation": uint  the registering decode rank's incarnation;
//	                            1..2^64-1 in the most compact msgpack
//	                            unsigned encoding; only when set
//
// A registration without it encodes exactly as vLLM's (every vector in
// testdata/push_reg.json still decodes and re-encodes byte for byte), and
// decoders skip keys they do not know. Nil counts as absent; 0, a negative
// or a non-integer value is malformed.
//
// Prefill ties each registration to the incarnation of the sender's rank
// in the payload it holds when it admits it. A registration whose
// decode_incarnation differs from that payload's is either early (the
// rank restarted since the handshake) or late (from a dead instance):
// prefill handshakes again once and admits it if the fresh payload agrees,
// and otherwise drops it; one whose incarnation belongs to a payload
// prefill has already replaced is dropped at once. When a matched WRITE
// finds the decode agent gone, prefill handshakes again and retries the
// WRITE once only if the rank's incarnation is still the registration's
// (prefill merely lost the connection); if decode restarted, or the
// registration had no incarnation to compare, it drops the registration
// and frees its request's blocks. A registration left in the matcher when
// the new instance becomes known is dropped when its request finishes or
// its registration timeout passes. Dropped registrations get no WRITE and
// no PUSH_FAIL — the instance that could read one is gone, and the agent
// of that name, the new instance, may hold a request of the same id — and
// are counted in stale_registrations. A registration from an agent the
// cached handshake does not name at all (a real engine names its agents
// anew at every start) makes prefill handshake again too; a fresh
// handshake that shows other agents or incarnations (without incarnations,
// as in vLLM's protocol: other agent metadata) counts decode_restarts and
// unloads the old agents' metadata once no WRITE into them is in flight.
// Remaining window: a WRITE posted
// before the restart (and PUSH_CANCEL, which a crash never sends) is not
// recalled; and a handshake already in flight when prefill asks for a
// fresh one may answer with the old payload, in which case a new
// instance's registration is dropped and decode waits for its timeout.
//
// # Limits on what decode can make prefill hold
//
// Every registration from a decode engine (engine id, host, port) that a
// prefill rank does not know yet adds a table entry and starts a
// handshake; every registration waits up to the registration timeout.
// Both are bounded per rank. Config.MaxPeers (default 1024) bounds the
// decode engines: at the limit the least recently used one with no
// registration admitted or parked, no handshake in flight and no WRITE is
// forgotten (with its cached handshake and the metadata of its agents
// that no other entry writes into, such as the same engine named under
// another host spelling; a later registration from it handshakes again,
// counted in evicted_peers), and
// when every one is busy the new registration is refused
// (peer_limit_refusals). Config.MaxPendingRegistrations (default
// 65536) bounds the registrations waiting for their request or for their
// engine's handshake; at the limit a new one is refused
// (pending_limit_refusals). Ids and hosts in every push message are at
// most 1024 bytes (notif.MaxIDLen): longer ones are refused from the
// string header, before anything is kept (oversized_ids, and counted as
// malformed). A refused registration gets PUSH_FAIL
// "overloaded" where it can be delivered: always under the pending limit
// once prefill knows the engine, never for an engine refused by the peer
// limit before its first handshake (push_fail_undeliverable counts it and
// decode waits for its registration timeout).
//
// # vLLM's protocol
//
// With EngineConfig.Protocol = connector.ProtocolVLLM (and
// EngineConfig.VLLM) the engine speaks vLLM's NixlPushConnector at
// connector version 12, so either half of a pair may be a vLLM instance:
// the handshakes run over vLLM's ZMQ side channel with its compatibility
// hash, whose transfer mode "push" both peers must have. Decode loads the
// metadata of the prefill ranks that write into it (vLLM's notif-only
// handshake) and sends each exactly vLLM's PUSH_REG, its 11 keys and
// nothing else (no transfer_id, decode_incarnation, registration_seq or
// staging); prefill handshakes with decode's side channel (decode_host,
// decode_port) and WRITEs with the plain completion
// "<decode request id>:<prefill world size>", and decode counts vLLM's
// pp_size * max(1, prefill TP / decode TP) of them. Agent names are the
// ones loading the metadata gives (vLLM's payload has none outside NIXL's
// blob). Prefill matches by exact request id, then without the
// "-xxxxxxxx" suffix; a transfer id (connector.Request.TransferID) is ignored,
// as a vLLM engine ignores the key. Staging is refused
// (RankConfig.Staging.Mode). PUSH_FAIL, PUSH_CANCEL, PUSH_CANCEL_ACK and
// the staged messages are never sent, and one that arrives is counted as
// unknown and changes nothing: decode's registration timeout is its only
// failure signal (push_fail_withheld counts what prefill could not say),
// and prefill's lease reaps finished blocks no registration claims. A
// vLLM decode's heartbeat "HB:<id>,..." moves the lease of each finished
// request still waiting under exactly one of those ids to at least now +
// 2/3 of the lease (lease_extensions). A gonixl decode sends none: vLLM's
// decode heartbeats only requests whose params carry prefill's request id
// (remote_request_id), which a push decode registers before prefill
// has one.
//
// Write safety without cancels. A request that decode ends other than by
// success (Abort, its registration timeout, a failed handshake or send
// after the registration went to some rank) cannot be withdrawn from
// prefill, so its blocks stay held, and its Result back, until no WRITE
// can land in them: until every prefill rank that got the registration
// has sent its completion (NIXL delivers it after the WRITE's bytes), or
// until RegistrationTimeout after the registration was sent plus
// CancelTimeout, whichever comes first (write_bound_releases counts the
// second). The bound holds because a prefill rank gives a registration up
// within its own registration timeout, shorter than decode's (a Producer's
// is, by Config's rule; a vLLM prefill writes when its request finishes,
// and its finished blocks lapse with the lease), and a WRITE posted before
// then moves bytes for at most two write timeouts, which CancelTimeout
// covers. A completion that arrives after the watchdog fired settles its
// rank the same way. With the defaults an aborted request's blocks may
// stay held 480 s + 93.3 s after its registration: the price of a
// protocol without cancels. Without a seq a late copy of an earlier
// completion of the same request id counts for a later registration of
// that id; vLLM's ids carry a random suffix, so ids are not reused.
//
// # Metrics
//
// Each rank's Stats (connector.Stats) has the counters both connectors
// keep (transfers, bytes, descriptors, transfer and post times, failed
// transfers, notifications and handshakes, expired requests, unknown, late
// and malformed notifications) and, in Extra, in this order on both sides:
// registrations_received, registrations_sent, matched_exact,
// matched_stripped, matched_transfer_id, duplicate_registrations,
// registrations_cancelled_before_arrival, unmatched_expired,
// push_fail_sent, push_fail_received, push_fail_undeliverable,
// registration_timeouts, misdirected_registrations, handshakes,
// push_cancel_sent, push_cancel_received, push_cancel_undeliverable,
// stuck_writes, cancelled_registrations, registrations_after_lease,
// peer_limit_refusals, pending_limit_refusals, evicted_peers,
// stale_registrations, push_cancel_ack_sent,
// push_cancel_ack_undeliverable, push_cancel_ack_received,
// cancel_timeouts, aborted_requests, oversized_ids,
// superseded_registrations, stale_completions, seqless_copies_dropped,
// and, used in vLLM's protocol only, push_fail_withheld,
// lease_extensions and write_bound_releases; then prefill_gone and
// prefill_unload_failed (decode: prefill ranks found dead, see Write
// safety), decode_restarts (prefill: decode engines found restarted),
// and progressive_writes and progressive_skipped (prefill: progressive
// push, docs/push.md);
// a rank that stages adds the staging counters after them
// (docs/metrics.md). With a Logger, those that moved in an interval are
// logged on that interval's "KV Transfer metrics:" line, as
// gonixl.<name>=<count>.
//
// # Limits
//
// Several KV-cache groups only through the grouped calls
// (RequestFinishedGroups, RegisterGroups; both protocols), unstaged; decode
// pipeline-parallel size 1, and a
// pipeline-parallel prefill only in gonixl's protocol, unstaged. With a prefix hit on
// decode and prefill blocks larger than decode's, give connector.Request.Tokens to
// RequestFinished. A failed request's blocks come back only after the
// prefill ranks answered, or at CancelTimeout (see Write safety).
package pushconn
