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
	case progressing && len(blockIDs) == len(prev.blocks):
		return nil
	}
	if !progressing {
		prev = progressState{h: &hold{id: requestID, transferID: o.transferID, tokens: tokens}, tokens: tokens, transferID: o.transferID}
		p.held[requestID] = true
	}
	prev.blocks = slices.Clone(blockIDs)
	p.progress[requestID] = prev
	p.progressQ = append(p.progressQ, progressEvent{h: prev.h, blocks: prev.blocks, final: len(prev.blocks), tokens: tokens})
	p.poll.Wake()
	return nil
}

// progressState is what the Producer keeps of a request that reports
// progress: its hold (the same in every report; the writer's from the
// first, so the Producer reads none of its fields but id), its final
// blocks, its prompt length and transfer id.
type progressState struct {
	h          *hold
	blocks     []int
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
