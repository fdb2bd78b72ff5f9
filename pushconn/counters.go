package pushconn

import (
	"github.com/gonixl/gonixl/internal/stats"
	"github.com/gonixl/gonixl/pushconn/internal/match"
)

// pushCounters are the counters the push connector keeps besides the
// shared ones; both sides register all of them so their lines read alike.
type pushCounters struct {
	regsReceived   *stats.Counter
	regsSent       *stats.Counter
	matchedExact   *stats.Counter
	matchedStrip   *stats.Counter
	matchedXferID  *stats.Counter
	duplicates     *stats.Counter
	cancelledFirst *stats.Counter
	unmatchedExp   *stats.Counter
	failSent       *stats.Counter
	failReceived   *stats.Counter
	failUndeliver  *stats.Counter
	timeouts       *stats.Counter
	misdirected    *stats.Counter
	handshakes     *stats.Counter

	cancelSent      *stats.Counter
	cancelReceived  *stats.Counter
	cancelUndeliver *stats.Counter
	stuckWrites     *stats.Counter
	cancelDropped   *stats.Counter
	afterLease      *stats.Counter
	stale           *stats.Counter
	peerLimit       *stats.Counter
	pendingLimit    *stats.Counter
	evicted         *stats.Counter
	forgotten       *stats.Counter

	cancelAckSent      *stats.Counter
	cancelAckUndeliver *stats.Counter
	cancelAckReceived  *stats.Counter
	cancelTimeouts     *stats.Counter
	aborted            *stats.Counter
	oversized          *stats.Counter
	superseded         *stats.Counter
	staleCompletions   *stats.Counter
	seqlessCopies      *stats.Counter

	failWithheld  *stats.Counter
	leaseExtended *stats.Counter
	writeBound    *stats.Counter

	prefillGone  *stats.Counter
	unloadFailed *stats.Counter

	decodeRestarts *stats.Counter

	progressWrites  *stats.Counter
	progressSkipped *stats.Counter
	// progressDeferred: staged parts put off for want of a prefill slot.
	progressDeferred *stats.Counter
	// progressStaged: progressive WRITEs into decode's staging slot.
	progressStaged *stats.Counter
	// stagedParts: staged parts decode scattered as they landed;
	// stagedPartsDropped: part notifications of no request decode holds
	// (nothing scattered); stagedPartsRejected: those that do not fit the
	// request (nothing changed).
	stagedParts         *stats.Counter
	stagedPartsDropped  *stats.Counter
	stagedPartsRejected *stats.Counter
}

func newPushCounters(s *stats.Set) *pushCounters {
	return &pushCounters{
		regsReceived:   s.Counter("registrations_received", "PUSH_REG registrations received and decoded (prefill)."),
		regsSent:       s.Counter("registrations_sent", "PUSH_REG registrations sent to prefill ranks (decode)."),
		matchedExact:   s.Counter("matched_exact", "Registrations matched to finished blocks by exact request id."),
		matchedStrip:   s.Counter("matched_stripped", "Registrations matched by request id without its -xxxxxxxx suffix."),
		matchedXferID:  s.Counter("matched_transfer_id", "Registrations matched by transfer id."),
		duplicates:     s.Counter("duplicate_registrations", "Registrations dropped as duplicates of one pending or already written."),
		cancelledFirst: s.Counter("registrations_cancelled_before_arrival", "Registrations dropped because decode's PUSH_CANCEL for them came (and was acknowledged) first."),
		unmatchedExp:   s.Counter("unmatched_expired", "Registrations whose request never finished within the registration timeout."),
		failSent:       s.Counter("push_fail_sent", "PUSH_FAIL notifications sent to decode."),
		failReceived:   s.Counter("push_fail_received", "PUSH_FAIL notifications received from prefill."),
		failUndeliver:  s.Counter("push_fail_undeliverable", "PUSH_FAIL notifications that could not be sent."),
		timeouts:       s.Counter("registration_timeouts", "Decode requests failed at the registration timeout."),
		misdirected:    s.Counter("misdirected_registrations", "Registrations for another engine or from an agent this rank does not write to."),
		handshakes:     s.Counter("handshakes", "Side-channel handshakes with peer engines that succeeded."),

		cancelSent:      s.Counter("push_cancel_sent", "PUSH_CANCEL notifications sent to prefill ranks for requests decode ended without success (decode)."),
		cancelReceived:  s.Counter("push_cancel_received", "PUSH_CANCEL notifications received and decoded (prefill)."),
		cancelUndeliver: s.Counter("push_cancel_undeliverable", "PUSH_CANCEL notifications that could not be sent (decode)."),
		stuckWrites:     s.Counter("stuck_writes", "Failed WRITEs the agent would not release within the write timeout (reported failed anyway)."),
		cancelDropped:   s.Counter("cancelled_registrations", "Registrations dropped without a WRITE because decode cancelled them (prefill)."),
		afterLease:      s.Counter("registrations_after_lease", "Registrations refused with PUSH_FAIL expired because their request's lease had already run out (prefill)."),
		peerLimit:       s.Counter("peer_limit_refusals", "Registrations refused (PUSH_FAIL overloaded where deliverable) because the rank served MaxPeers decode engines and none was idle (prefill)."),
		pendingLimit:    s.Counter("pending_limit_refusals", "Registrations refused (PUSH_FAIL overloaded where deliverable) because the rank held MaxPendingRegistrations registrations (prefill)."),
		evicted:         s.Counter("evicted_peers", "Idle decode engines forgotten to make room for a new one under MaxPeers (prefill)."),
		forgotten:       s.Counter("forgotten_engines", "Peer engines forgotten after RankConfig.EngineTTL without a request (their metadata unloaded; the next request handshakes again)."),
		stale:           s.Counter("stale_registrations", "Registrations dropped without a WRITE or PUSH_FAIL because the decode rank that sent them has restarted since (prefill)."),

		cancelAckSent:       s.Counter("push_cancel_ack_sent", "PUSH_CANCEL_ACK notifications sent: no WRITE of the cancelled registration can land any more (prefill)."),
		cancelAckUndeliver:  s.Counter("push_cancel_ack_undeliverable", "PUSH_CANCEL_ACK notifications that could not be sent (prefill)."),
		cancelAckReceived:   s.Counter("push_cancel_ack_received", "PUSH_CANCEL_ACK notifications received and decoded (decode)."),
		cancelTimeouts:      s.Counter("cancel_timeouts", "Failed requests whose blocks were released at CancelTimeout, before every prefill rank had written, failed or acknowledged the cancel (decode)."),
		aborted:             s.Counter("aborted_requests", "Requests ended by Abort (both sides)."),
		progressWrites:      s.Counter("progressive_writes", "WRITEs of blocks a prefill reported final (Progress) posted before the request finished (prefill)."),
		progressSkipped:     s.Counter("progressive_skipped", "Registrations written whole at RequestFinished although their request reported progress: blocks that do not map one to one, a decode engine not yet handshaken, or a progressive WRITE that failed (prefill)."),
		progressDeferred:    s.Counter("progressive_deferred", "Progressive WRITEs into decode's staging slot put off because no prefill staging slot was free: their blocks go with the request's next report or its final WRITE (prefill)."),
		progressStaged:      s.Counter("progressive_staged_writes", "Progressive WRITEs gathered into a staging slot and written into decode's slot (counted in progressive_writes too) (prefill)."),
		stagedParts:         s.Counter("staged_parts_scattered", "Progressive staged parts (PUSH_STAGED_PART) scattered from the staging slot into the blocks as they landed, before their request finished (decode)."),
		stagedPartsDropped:  s.Counter("staged_parts_dropped", "PUSH_STAGED_PART notifications of a request decode no longer holds (released, failed, another registration of the id) or of a rank it does not expect in a slot: nothing scattered (decode)."),
		stagedPartsRejected: s.Counter("staged_parts_rejected", "PUSH_STAGED_PART notifications that do not fit their request (blocks outside the image, blocks scattered already, an image of several KV-cache groups): nothing changed (decode)."),
		oversized:           s.Counter("oversized_ids", "Notifications refused because an id or host in them was longer than the limit (1024 bytes) (prefill)."),
		superseded:          s.Counter("superseded_registrations", "Waiting registrations replaced by the same request id registered again by the same decode rank (prefill)."),
		staleCompletions:    s.Counter("stale_completions", "Completions (plain or staged) that name another registration of their request id than the one decode holds, or none when it had a seq; counted for nothing (decode)."),
		seqlessCopies:       s.Counter("seqless_copies_dropped", "Registrations without registration_seq dropped as late copies (same sender, ids and block ids) of one the rank had ended without a WRITE and told decode so, by PUSH_CANCEL_ACK or PUSH_FAIL (prefill)."),

		failWithheld:  s.Counter("push_fail_withheld", "Registrations that failed or expired on prefill without a PUSH_FAIL, which vLLM's protocol does not have: decode sees them at its registration timeout (prefill, vLLM protocol)."),
		leaseExtended: s.Counter("lease_extensions", "Leases of finished requests waiting for their registration extended by a vLLM heartbeat (prefill, vLLM protocol)."),
		writeBound:    s.Counter("write_bound_releases", "Requests ended other than by success whose blocks were released only once no WRITE could still land: RegistrationTimeout after the registration plus CancelTimeout (decode, vLLM protocol, which has no PUSH_CANCEL)."),

		prefillGone:  s.Counter("prefill_gone", "Prefill rank incarnations found dead (a send to the agent failed and the engine's address refused connections or published another incarnation) and unloaded: their requests failed or released their blocks at once (decode)."),
		unloadFailed: s.Counter("prefill_unload_failed", "Prefill agents found dead whose metadata could not be unloaded: their requests keep their blocks until the cancel timeout (decode)."),

		decodeRestarts: s.Counter("decode_restarts", "Decode engines found restarted at the same address (a fresh handshake showed other agents or incarnations): handshook with the new instance, the old agents' metadata unloaded, the old instance's registrations dropped unwritten (prefill)."),
	}
}

// countMatch counts a match by how it paired.
func (pc *pushCounters) countMatch(k match.Kind) {
	switch k {
	case match.ByExactID:
		pc.matchedExact.Inc()
	case match.ByStrippedID:
		pc.matchedStrip.Inc()
	case match.ByTransferID:
		pc.matchedXferID.Inc()
	}
}
