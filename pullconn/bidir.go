package pullconn

import (
	"time"

	"github.com/gonixl/gonixl/connector"
)

// Bidirectional KV (vLLM's bidirectional_kv_xfer): the KV of a
// conversation's earlier turns moves back from decode to prefill (D->P) so
// that prefill computes only the new turn's tokens. It is the pull protocol
// run the other way round, by the same code: the side that holds blocks is
// a Producer, the side that READs them a Consumer, whichever engine each
// sits on. A decode engine that exports history runs a HistoryExporter
// (a Producer) beside its Consumer on every TP rank; a prefill engine that
// reads history back runs a HistoryReader (a Consumer) beside its Producer.
// Leases, heartbeats, hold queries, pins, abort, the read guard and the
// exactly-once end of a request are the ones of the prefill->decode
// direction, with decode's TTL as the lease.
//
// Each role of a rank takes its own NIXL agent over the rank's one KV
// layout: the memory is registered once per agent, so that closing one
// role deregisters only its agent's registration and a closed exporter's
// blocks are out of reach of any READ before DrainFreed hands them back,
// whatever the other role still does.

// Defaults of the bidirectional direction (vLLM's names and values).
const (
	// DefaultDecoderKVBlocksTTL is how long decode holds a finished turn's
	// blocks for the next turn's prefill to read back (vLLM's
	// decoder_kv_blocks_ttl): a HistoryExporter's default lease.
	DefaultDecoderKVBlocksTTL = 480 * time.Second
	// DefaultKVRecomputeThreshold is vLLM's kv_recompute_threshold with
	// bidirectional transfer on: a history shorter than this many tokens
	// is recomputed rather than read back.
	DefaultKVRecomputeThreshold = 64
	// historyExpiryMargin is a HistoryReader's default ExpiryMargin: it
	// does not READ history whose hold ends, on its clock, within 5 s
	// (vLLM's _KV_BLOCKS_EXPIRY_SAFETY_MARGIN), beyond the handshake's
	// clock-offset uncertainty.
	historyExpiryMargin = 5 * time.Second
)

// HistoryExporter is a decode TP rank's D->P side: a Producer that holds a
// finished turn's blocks for DefaultDecoderKVBlocksTTL (Config's Lease,
// when set) and returns the Params that let the next turn's prefill read
// them back. The decode engine frees an exported turn's blocks when
// DrainFreed returns its id: read back by every prefill rank that reads
// them, aborted and past the deadline it advertised, or expired.
type HistoryExporter struct {
	*Producer
}

// NewHistoryExporter starts the D->P side of a decode rank on the decode
// engine pub. cfg.Agent must not be the agent of the rank's Consumer (see
// the package's bidirectional notes); cfg.Layout is the rank's KV layout.
func NewHistoryExporter(pub *connector.Engine, cfg Config) (*HistoryExporter, error) {
	if cfg.Lease == 0 {
		cfg.Lease = DefaultDecoderKVBlocksTTL
	}
	p, err := NewProducer(pub, cfg)
	if err != nil {
		return nil, err
	}
	return &HistoryExporter{p}, nil
}

// ExportTurn holds blockIDs, the full blocks of a finished turn (its prompt
// and what decode generated, in token order) that carry numTokens tokens,
// and returns the Params the next turn's prefill passes to
// HistoryReader.LoadHistory. Every rank of the engine returns the same
// Params. The refusals are RequestFinished's, and numTokens must be
// positive.
func (h *HistoryExporter) ExportTurn(requestID string, blockIDs []int, numTokens int) (Params, error) {
	if numTokens <= 0 || numTokens > len(blockIDs)*h.cfg.Layout.BlockSize {
		return Params{}, invalidf("request %q: numTokens is %d, want 1..%d (%d blocks of %d tokens)", requestID, numTokens, len(blockIDs)*h.cfg.Layout.BlockSize, len(blockIDs), h.cfg.Layout.BlockSize)
	}
	p, err := h.RequestFinished(requestID, blockIDs)
	if err != nil {
		return Params{}, err
	}
	p.NumTokens = numTokens
	return p, nil
}

// HistoryReader is a prefill TP rank's D->P side: a Consumer that READs a
// conversation's earlier turns from the decode engine holding them, into
// the prefill's own blocks, unless the history is shorter than the
// recompute threshold.
type HistoryReader struct {
	*Consumer
	threshold int
}

// NewHistoryReader starts the D->P side of a prefill rank on the prefill
// engine pub. threshold is the least number of history tokens worth
// reading back (0: DefaultKVRecomputeThreshold; 1 reads any history);
// cfg.ExpiryMargin defaults to 5 s. cfg.Agent must not be
// the agent of the rank's Producer.
func NewHistoryReader(pub *connector.Engine, cfg Config, threshold int) (*HistoryReader, error) {
	if threshold < 0 {
		return nil, invalidf("recompute threshold is %d, want >= 0", threshold)
	}
	if threshold == 0 {
		threshold = DefaultKVRecomputeThreshold
	}
	if cfg.ExpiryMargin == 0 {
		cfg.ExpiryMargin = historyExpiryMargin
	}
	c, err := NewConsumer(pub, cfg)
	if err != nil {
		return nil, err
	}
	return &HistoryReader{Consumer: c, threshold: threshold}, nil
}

// Threshold returns the least number of history tokens the reader reads
// back.
func (h *HistoryReader) Threshold() int { return h.threshold }

// LoadHistory starts reading back the history p names (a decode engine's
// ExportTurn Params) into localBlocks, the prefill blocks that hold the
// history's tokens from token 0, and reports whether it reads: false when
// p carries fewer than Threshold tokens (or does not say how many), in
// which case prefill recomputes the history and only the completions go
// to decode, so that decode frees its blocks now instead of at the TTL.
// Either way the request's end comes out of Drain exactly once, as a
// Load's does; a failed one (expired hold, not held, a READ failed) means
// the blocks hold no valid history and prefill recomputes it. Refusals are
// Load's, and nothing is sent then.
func (h *HistoryReader) LoadHistory(requestID string, p Params, localBlocks []int) (bool, error) {
	if p.NumTokens < h.threshold {
		return false, h.Load(requestID, p, nil)
	}
	return true, h.Load(requestID, p, localBlocks)
}
