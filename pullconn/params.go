package pullconn

import (
	"fmt"
	"math"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
)

// Params are the transfer parameters prefill returns for a finished request
// and decode needs to load it: vLLM's kv_transfer_params, with the same JSON
// keys, plus the transfer mode.
type Params struct {
	connector.TransferParams
	PPSize int `json:"pp_size,omitempty"`
	// NumTokens is the request's prompt length when prefill knows it; decode
	// needs it only for a prefix hit with a smaller block size than prefill's.
	NumTokens int `json:"num_tokens,omitempty"`
	// TransferMode is "pull"; a push decode engine refuses these params.
	TransferMode string `json:"transfer_mode,omitempty"`
	// RemoteBlocksExpiryTime is when prefill's hold of the blocks ends, in
	// seconds since the Unix epoch on prefill's clock (vLLM's key). Decode
	// never posts or finishes a READ past it, less the handshake's clock
	// offset estimate and Config.ExpiryMargin, unless a heartbeat
	// answer extended it. Zero means prefill does not say; decode then
	// has no such guard.
	RemoteBlocksExpiryTime float64 `json:"remote_blocks_expiry_time,omitempty"`
	// RemoteRegistrationGeneration is vLLM's remote_registration_generation
	// (connector version 15 on): how often prefill's registration changed.
	// A decode that handshook with prefill at a lower generation forgets
	// that handshake and handshakes again, as vLLM's decode does
	// (_read_blocks_for_req in nixl/pull_worker.py at vllm 0.34.0). Zero
	// when prefill does not say.
	RemoteRegistrationGeneration int `json:"remote_registration_generation,omitempty"`
	// RemoteStagingSlot, when set, is the staging slot every prefill rank
	// gathered the request's blocks into (our own key; see Staging). A
	// decode without staging, or vLLM's, reads the blocks instead.
	RemoteStagingSlot *int `json:"remote_staging_slot,omitempty"`
	// RemoteStagingAwait, with RemoteStagingSlot, says prefill is still
	// gathering into the slot, chunk by chunk, as it returns the Params
	// (our own key): decode READs a chunk of the slot only once a
	// readiness query on the side channel says its regions are there. A
	// decode that does not know the key never matches the hold it names
	// (the key is in the hold's digest), so it cannot trust a slot read
	// too early.
	RemoteStagingAwait bool `json:"remote_staging_await,omitempty"`
	// RemoteHoldNonce tells this hold of the request apart from any other
	// hold of the same id (our own key): decode names it, with the blocks,
	// deadline and slot, when it asks prefill to pin the hold. Below 2^53,
	// so that JSON decoders that read numbers as float64 keep it. Zero from
	// a peer that does not say.
	RemoteHoldNonce uint64 `json:"remote_hold_nonce,omitempty"`
	// RemoteIncarnation names the prefill engine's incarnation that made
	// these Params (our own key): a digest of the incarnations its ranks
	// publish in the handshake payload, drawn anew each time a rank starts.
	// A decode whose handshake with the engine names another one handshakes
	// again before it reads: the engine restarted at its address. Below
	// 2^53, like RemoteHoldNonce. Zero from a peer that does not say.
	RemoteIncarnation uint64 `json:"remote_incarnation,omitempty"`
}

// holdKey is the identity of the hold these Params describe, as prefill
// recorded it and decode asks to pin it: an FNV-1a digest of the request
// id, the block ids, the advertised deadline, the staging slot and the
// hold's nonce. Params naming other blocks or another slot, or those of
// another hold of the same id (another nonce), do not match; it is never
// 0.
func (p *Params) holdKey() uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	for i := 0; i < len(p.RemoteRequestID); i++ {
		h ^= uint64(p.RemoteRequestID[i])
		h *= prime
	}
	mix(uint64(len(p.RemoteRequestID)))
	mix(uint64(len(p.RemoteBlockIDs)))
	for _, b := range p.RemoteBlockIDs {
		mix(uint64(b))
	}
	if p.RemoteGroupBlockIDs != nil {
		// Grouped Params: every list and its length, and the tokens they
		// cover (single-group keys are digested as they always were).
		mix(uint64(len(p.RemoteGroupBlockIDs)) + 1<<32)
		for _, ids := range p.RemoteGroupBlockIDs {
			mix(uint64(len(ids)))
			for _, b := range ids {
				mix(uint64(b))
			}
		}
		mix(uint64(p.NumTokens))
	}
	mix(math.Float64bits(p.RemoteBlocksExpiryTime))
	mix(p.RemoteHoldNonce)
	if s := p.RemoteStagingSlot; s != nil {
		mix(uint64(*s) + 1)
	} else {
		mix(0)
	}
	if p.RemoteStagingAwait {
		// Only when set: the keys of Params without it stay as they were.
		mix(0xa3a17)
	}
	return max(h, 1)
}

// expiry returns RemoteBlocksExpiryTime as a time on prefill's clock.
func (p *Params) expiry() (time.Time, bool) {
	if p.RemoteBlocksExpiryTime <= 0 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(p.RemoteBlocksExpiryTime)
	// The float holds a whole number of microseconds (expirySeconds) give or
	// take its rounding: truncating to the microsecond never gives a later
	// time than the one encoded.
	return time.Unix(int64(sec), int64(frac*1e9)).Truncate(time.Microsecond), true
}

// expirySeconds is t as RemoteBlocksExpiryTime, rounded down to the
// microsecond so that the float never names a later time than the hold's.
func expirySeconds(t time.Time) float64 {
	us := t.UnixMicro()
	return float64(us/1e6) + float64(us%1e6)/1e6
}

// maxExpirySeconds bounds RemoteBlocksExpiryTime (year 2286), so that the
// time it names fits time.Time's nanosecond arithmetic.
const maxExpirySeconds = 1e10

// maxBlockID bounds block ids from the network far above any real cache.
const maxBlockID = 1 << 30

// Validate reports the first field that makes p unusable for a pull load.
func (p *Params) Validate() error {
	switch {
	case !p.DoRemotePrefill:
		return invalidf("Params.DoRemotePrefill is false: the request was not prefilled remotely")
	case p.TransferMode != "" && p.TransferMode != "pull":
		return fmt.Errorf("%w: transfer mode mismatch: local %q, remote %q", connector.ErrIncompatible, "pull", p.TransferMode)
	case p.RemoteEngineID == "":
		return invalidf("Params.RemoteEngineID is empty")
	case p.RemoteRequestID == "":
		return invalidf("Params.RemoteRequestID is empty")
	case p.RemoteHost == "":
		return invalidf("Params.RemoteHost is empty")
	case p.RemotePort < 1 || p.RemotePort > 65535:
		return invalidf("Params.RemotePort is %d, want 1..65535", p.RemotePort)
	case p.TPSize < 1:
		return invalidf("Params.TPSize is %d, want >= 1", p.TPSize)
	case p.PPSize > 1:
		return invalidf("Params.PPSize is %d: the pull connector supports prefill PP size 1 only", p.PPSize)
	case p.NumTokens < 0:
		return invalidf("Params.NumTokens is %d, want >= 0", p.NumTokens)
	case math.IsNaN(p.RemoteBlocksExpiryTime) || math.IsInf(p.RemoteBlocksExpiryTime, 0) || p.RemoteBlocksExpiryTime < 0 || p.RemoteBlocksExpiryTime > maxExpirySeconds:
		return invalidf("Params.RemoteBlocksExpiryTime is %v, want seconds since the Unix epoch (0 for none)", p.RemoteBlocksExpiryTime)
	}
	if p.RemoteHoldNonce >= 1<<53 {
		return invalidf("Params.RemoteHoldNonce is %d, want below 2^53", p.RemoteHoldNonce)
	}
	if p.RemoteIncarnation >= 1<<53 {
		return invalidf("Params.RemoteIncarnation is %d, want below 2^53", p.RemoteIncarnation)
	}
	if s := p.RemoteStagingSlot; s != nil && (*s < 0 || *s >= staging.MaxSlots) {
		return invalidf("Params.RemoteStagingSlot is %d, want 0..%d", *s, staging.MaxSlots-1)
	}
	if p.RemoteStagingAwait && p.RemoteStagingSlot == nil {
		return invalidf("Params.RemoteStagingAwait is set without Params.RemoteStagingSlot")
	}
	for i, b := range p.RemoteBlockIDs {
		if b < 0 || b > maxBlockID {
			return invalidf("Params.RemoteBlockIDs[%d] is %d, want 0..%d", i, b, maxBlockID)
		}
	}
	if len(p.RemoteGroupBlockIDs) > descriptors.MaxGroups {
		return invalidf("Params.RemoteBlockIDs has %d KV-cache group lists, limit %d", len(p.RemoteGroupBlockIDs), descriptors.MaxGroups)
	}
	for g, ids := range p.RemoteGroupBlockIDs {
		for i, b := range ids {
			if b < 0 || b > maxBlockID {
				return invalidf("Params.RemoteBlockIDs[%d][%d] is %d, want 0..%d", g, i, b, maxBlockID)
			}
		}
	}
	return nil
}
