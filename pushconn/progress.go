package pushconn

import (
	"slices"

	"github.com/gonixl/gonixl/internal/notif"
)

// Progress reports that request requestID, which prefill still computes,
// has blockIDs final in every layer: the request's first blocks on this
// rank, in token order, every token of each computed (a chunk of chunked
// prefill ended, say). tokens is the prompt's length, which decode's
// registration is counted against (its prefix-cache hit). Each report of a
// request extends the previous one; RequestFinished, which still comes,
// gives the whole list, starting with the reported blocks.
//
// The writer WRITEs reported blocks at once into every registration
// already waiting for the request, without a completion, and the rest at
// RequestFinished with it, so decode sees no difference (a vLLM decode
// pairs): only the time after prefill shrinks. From the first report the
// blocks are the connector's as after RequestFinished: they come out of
// DrainFreed, and Abort withdraws the request (no WRITE of it starts; one in
// flight ends first). Blocks decode holds at another block size are
// written whole at RequestFinished (counted in progressive_skipped).
//
// Per layer (the option connector.Request.FinalLayers sets, n > 0): the
// blocks after those final in every layer are final in the rank's first n
// layers (a layer's forward pass ended), and the writer WRITEs each newly
// final layer of them at once; the blocks before them stay final in every
// layer. A later report gives them more layers (never fewer), or every
// layer (n 0, or the layout's NumLayers), perhaps with more blocks; a
// per-layer report adds no blocks while the previous ones are final in some
// layers only (prefill ends a chunk in every layer before the next starts).
// A registration that takes staged parts (below) writes whole blocks only:
// its per-layer blocks wait for the report that makes them final in every
// layer, or for RequestFinished.
//
// With RankConfig.Staging, a registration whose decode rank offered a
// staging slot gets reported blocks gathered into a prefill slot and
// written into decode's slot, one run per region (a staged part, which a
// decode that offers parts scatters as it lands, PUSH_STAGED_PART), and
// the rest at RequestFinished as the staged WRITE's chunks with their
// staged completions; a report that finds no prefill slot free is put off to the
// next report or RequestFinished (counted in progressive_deferred).
//
// Progress refuses (connector.ErrInvalid, nothing changes) a layout of
// several KV-cache groups: its WRITEs go whole at RequestFinished, as
// without Progress. A report after Abort, while the blocks are still held,
// does nothing. After Close it returns an error matching
// connector.ErrClosed.
func (p *Producer) Progress(requestID string, blockIDs []int, tokens int, opts ...requestOption) error {
	o := p.engine.vllmOpts(applyOpts(opts))
	switch {
	case requestID == "" || len(requestID) > notif.MaxIDLen:
		return invalidf("request id must be 1..%d bytes, got %d", notif.MaxIDLen, len(requestID))
	case len(p.cfg.Layout.Groups) > 0:
		return invalidf("request %q: progressive push takes a layout of one KV-cache group, this one has %d", requestID, len(p.cfg.Layout.Groups))
	case tokens < 1:
		return invalidf("request %q: tokens is %d, want the prompt's length (>= 1)", requestID, tokens)
	case o.layers < 0 || o.layers > p.cfg.Layout.NumLayers:
		return invalidf("request %q: FinalLayers is %d, want 0..%d (the rank's layers; 0 or %d: every layer)", requestID, o.layers, p.cfg.Layout.NumLayers, p.cfg.Layout.NumLayers)
	case len(blockIDs)*p.cfg.Layout.BlockSize > tokens+p.cfg.Layout.BlockSize-1:
		return invalidf("request %q: %d final blocks of %d tokens are more than a prompt of %d tokens fills", requestID, len(blockIDs), p.cfg.Layout.BlockSize, tokens)
	}
	for i, id := range blockIDs {
		if id < 0 || id >= p.cfg.Layout.NumBlocks {
			return invalidf("request %q block %d is %d, outside 0..%d", requestID, i, id, p.cfg.Layout.NumBlocks-1)
		}
	}
	if err := p.engine.core.CheckOpen(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, progressing := p.progress[requestID]
	switch {
	case p.closed:
		return errClosed
	case p.aborting[requestID]:
		return nil
	case p.held[requestID] && !progressing:
		return invalidf("request %q is already finished and held", requestID)
	case len(blockIDs) < len(prev.blocks) || !slices.Equal(blockIDs[:len(prev.blocks)], prev.blocks):
		return invalidf("request %q: the final blocks %v do not extend those reported before (%d blocks)", requestID, blockIDs, len(prev.blocks))
	case progressing && (tokens != prev.tokens || o.transferID != prev.transferID):
		return invalidf("request %q: reported with %d tokens and transfer id %q before, now %d and %q", requestID, prev.tokens, prev.transferID, tokens, o.transferID)
	}
	// What the report makes final: every block in every layer, or (per
	// layer) the blocks after the final ones in the first layers.
	final, layers := len(blockIDs), 0
	if o.layers > 0 && o.layers < p.cfg.Layout.NumLayers {
		final, layers = prev.final, o.layers
	}
	tail := len(prev.blocks) > prev.final // blocks final in some layers only
	switch {
	case layers > 0 && tail && len(blockIDs) > len(prev.blocks):
		return invalidf("request %q: blocks %d..%d reported final in layers [0, %d) while blocks %d..%d are final in %d of %d layers only (a chunk ends in every layer before the next starts)",
			requestID, len(prev.blocks), len(blockIDs)-1, layers, prev.final, len(prev.blocks)-1, prev.layers, p.cfg.Layout.NumLayers)
	case layers > 0 && tail && layers < prev.layers:
		return invalidf("request %q: blocks %d..%d reported final in %d layers, before in %d (layers do not go backwards)",
			requestID, prev.final, len(prev.blocks)-1, layers, prev.layers)
	case progressing && final == prev.final && (final == len(blockIDs) || layers == prev.layers):
		return nil // nothing new
	}
	if !progressing {
		prev = progressState{h: &hold{id: requestID, transferID: o.transferID, tokens: tokens}, tokens: tokens, transferID: o.transferID}
		p.held[requestID] = true
	}
	prev.blocks, prev.final, prev.layers = slices.Clone(blockIDs), final, layers
	p.progress[requestID] = prev
	p.progressQ = append(p.progressQ, progressEvent{h: prev.h, blocks: prev.blocks, final: final, layers: layers, tokens: tokens})
	p.poll.Wake()
	return nil
}

// progressState is what the Producer keeps of a request that reports
// progress: its hold (the same in every report; the writer's from the
// first, so the Producer reads none of its fields but id), its reported
// blocks (blocks[:final] final in every layer, the rest in the first
// layers), its prompt length and transfer id.
type progressState struct {
	h          *hold
	blocks     []int
	final      int
	layers     int
	tokens     int
	transferID string
}

// finishing checks a RequestFinished of held id against its progress
// reports and ends them; p.mu is held. ok false: the id is held without
// progress (finished already).
func (p *Producer) finishing(h *hold) (ok bool, err error) {
	st, progressing := p.progress[h.id]
	if !progressing {
		return false, nil
	}
	switch {
	case p.aborting[h.id]:
		return true, invalidf("request %q was aborted while it was prefilled", h.id)
	case h.groups != nil:
		return true, invalidf("request %q reported progress, and grouped requests take none", h.id)
	case len(h.blocks) < len(st.blocks) || !slices.Equal(h.blocks[:len(st.blocks)], st.blocks):
		return true, invalidf("request %q: its blocks do not start with the %d it reported final", h.id, len(st.blocks))
	case h.transferID != st.transferID:
		return true, invalidf("request %q: transfer id %q, its progress reports said %q", h.id, h.transferID, st.transferID)
	}
	if h.tokens == 0 {
		h.tokens = st.tokens
	}
	delete(p.progress, h.id)
	return true, nil
}
