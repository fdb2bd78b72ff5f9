package pullconn

import (
	"github.com/gonixl/gonixl/internal/handshake"
)

// An engine's incarnation (Params.RemoteIncarnation) is a digest of the
// incarnations its ranks publish in the handshake payload
// (handshake.Rank.Incarnation, drawn anew each time a rank starts), so that
// decode can tell, from the Params alone, whether the engine it handshook
// with made them: a prefill engine restarted at the same address, under the
// same engine id and agent names, publishes another one.

// incarnationDigest folds the ranks' incarnations, in TP-rank order, into
// one number below 2^53 (the Params travel as JSON; see RemoteHoldNonce).
// It is 0, "does not say", when a rank's is unknown.
func incarnationDigest(n int, rank func(int) uint64) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := range n {
		v := rank(i)
		if v == 0 {
			return 0
		}
		for range 8 {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	if n == 0 {
		return 0
	}
	return h>>11 | 1
}

// incarnationLocked is the engine's incarnation now: 0 until every TP rank
// has published. e.mu is held.
func (e *pullEngine) incarnationLocked() uint64 {
	n := e.core.Config().TPSize
	if len(e.incarnations) != n {
		return 0
	}
	return incarnationDigest(n, func(i int) uint64 { return e.incarnations[i] })
}

// published records the incarnation that Producer p of TP rank rank
// published, unless p was closed meanwhile.
func (e *pullEngine) published(rank int, p *Producer, inc uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.producers[rank] == p {
		e.incarnations[rank] = inc
	}
}

// payloadIncarnation is the incarnation of the engine that published p, as
// its Params name it; 0 when a rank does not say.
func payloadIncarnation(p *handshake.Payload) uint64 {
	if p == nil || len(p.Ranks) != p.TPSize {
		return 0
	}
	return incarnationDigest(p.TPSize, func(i int) uint64 { return p.Ranks[i].Incarnation })
}
