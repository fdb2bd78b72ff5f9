package pullconn

import (
	"fmt"
	"slices"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
)

// remote is what a decode rank knows of one prefill engine: whether the
// handshake finished, and then which of its ranks this rank reads and
// notifies, their agents (metadata loaded) and layouts.
type remote struct {
	key      string
	engineID string
	addr     string
	tp       int // its TP size, from the first Params that named it (vLLM's payload does not say)
	ready    bool
	setup    *pairing
	parked   []*load // waiting for the handshake
	querying bool    // a hold query is in flight
	// clock is the latest estimate of the engine's clock against ours: the
	// handshake's, then each hold query's and confirmation's, so that a
	// step of either clock is seen at the next exchange.
	clock handshake.Clock
	// lastActive is when a request was last routed to the engine
	// (RankConfig.EngineTTL).
	lastActive time.Time
	// generation is the highest remote_registration_generation a request
	// routed to this handshake named.
	generation int
	// retired are incarnations (Params.RemoteIncarnation) a handshake made
	// after their Params showed are not the engine's any more: loads of
	// them fail without another handshake.
	retired map[uint64]bool
}

// pins reports whether the engine pins holds for READs (a gonixl prefill
// that says so in its payload, Payload.Confirms).
func (r *remote) pins() bool { return r.setup != nil && r.setup.payload.Confirms }

// pairing is the result of a handshake as one decode rank sees it.
type pairing struct {
	payload *handshake.Payload
	agents  []string // by prefill rank; "" for ranks this rank never contacts
	sources []int    // prefill ranks this rank READs from
	notify  []int    // prefill ranks this rank sends its completion to
}

// notifyRanks returns the prefill ranks decode rank r (of decodeTP) sends
// completions to, so that each prefill rank of prefillTP receives exactly
// expectedFor(decodeTP) of them: with more decode ranks, decodeTP/prefillTP
// decode ranks per prefill rank; otherwise every prefill rank once, from the
// decode rank whose heads it holds.
func notifyRanks(r, decodeTP, prefillTP int) ([]int, error) {
	if decodeTP >= prefillTP {
		if decodeTP%prefillTP != 0 {
			return nil, fmt.Errorf("%w: decode TP %d is not a multiple of prefill TP %d", connector.ErrIncompatible, decodeTP, prefillTP)
		}
		return []int{r / (decodeTP / prefillTP)}, nil
	}
	if prefillTP%decodeTP != 0 {
		return nil, fmt.Errorf("%w: prefill TP %d is not a multiple of decode TP %d", connector.ErrIncompatible, prefillTP, decodeTP)
	}
	k := prefillTP / decodeTP
	out := make([]int, k)
	for i := range out {
		out[i] = r*k + i
	}
	return out, nil
}

// pair checks that local can read from the engine in p and works out which
// ranks it reads and notifies.
func pair(p *handshake.Payload, local *descriptors.Layout) (*pairing, error) {
	src := &p.Ranks[0].Layout
	if err := descriptors.Compatible(src, local); err != nil {
		return nil, fmt.Errorf("%w: engine %q: %v", connector.ErrIncompatible, p.EngineID, err)
	}
	sources, err := descriptors.Sources(src, local)
	if err != nil {
		return nil, fmt.Errorf("%w: engine %q: %v", connector.ErrIncompatible, p.EngineID, err)
	}
	notify, err := notifyRanks(local.TPRank, local.TPSize, p.TPSize)
	if err != nil {
		return nil, err
	}
	for _, s := range sources {
		if !slices.Contains(notify, s) {
			// Another decode rank's completion could free blocks this
			// rank still reads.
			return nil, fmt.Errorf("%w: decode rank %d of %d reads prefill rank %d of %d, which it does not notify (notifies %v)",
				connector.ErrIncompatible, local.TPRank, local.TPSize, s, p.TPSize, notify)
		}
	}
	return &pairing{payload: p, agents: make([]string, p.TPSize), sources: sources, notify: notify}, nil
}

// cachedBlocks works out how many of the request's first decode blocks the
// decode rank already holds (a prefix hit), from the two block counts and
// block sizes; see descriptors.Request.
func cachedBlocks(p *Params, remoteBS, localBS, nLocal int) (int, error) {
	nRemote := len(p.RemoteBlockIDs)
	total := 0
	switch {
	case p.NumTokens > 0:
		total = (p.NumTokens + localBS - 1) / localBS
	case remoteBS == localBS:
		total = nRemote
	case localBS > remoteBS:
		k := localBS / remoteBS
		total = (nRemote + k - 1) / k
	default:
		k := remoteBS / localBS
		if nLocal > (nRemote-1)*k && nLocal <= nRemote*k {
			total = nLocal // no prefix hit: the local blocks are the request
		} else {
			return 0, invalidf("request %q: %d local blocks of %d tokens cannot be placed against %d remote blocks of %d tokens without Params.NumTokens",
				p.RemoteRequestID, nLocal, localBS, nRemote, remoteBS)
		}
	}
	if nLocal > total {
		return 0, invalidf("request %q: %d local blocks but the request needs only %d blocks of %d tokens", p.RemoteRequestID, nLocal, total, localBS)
	}
	return total - nLocal, nil
}
