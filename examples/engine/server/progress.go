package server

import (
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
)

// Progressive push in the simulated prefill (Config.ProgressChunk): the
// batch's prompts are computed chunk by chunk, one after the other, and
// after each chunk the blocks it made final (every token computed, in
// every layer) are reported to each rank's connector, which WRITEs them
// into decode while the next chunk computes. The modeled time is the
// prompt's: each chunk takes its share of it (ComputeModel.PrefillFrom:
// later chunks attend over more tokens, so they take longer), and the
// step's total stays what it is without progress.

// computeChunks sleeps through the batch's chunks from start, reporting
// each chunk's final blocks but the last chunk's (RequestFinished gives
// those).
func (l *loop) computeChunks(batch []*request, start time.Time) {
	c, chunk, bs := l.s.cfg.Compute, l.s.cfg.ProgressChunk, l.s.cfg.Model.BlockSize
	at := c.PrefillBase
	for _, r := range batch {
		n := len(r.tokens)
		for from := r.hist.read; from < n; from += chunk {
			to := min(from+chunk, n)
			at += c.PrefillFrom(from, to) - c.PrefillBase
			if to == n || r.kind != kindPrefill {
				continue
			}
			if rest := at - time.Since(start); rest > 0 {
				time.Sleep(rest)
			}
			if final := to / bs; final > 0 {
				l.reportProgress(r, final)
			}
		}
	}
}

// reportProgress reports request r's first final blocks to every rank
// that takes progress; a rank that refuses is not asked again for r.
func (l *loop) reportProgress(r *request, final int) {
	if r.progressed == nil {
		r.progressed, r.progressOff = make([]bool, len(l.s.prods)), make([]bool, len(l.s.prods))
	}
	for i, p := range l.s.prods {
		pr, ok := p.(connector.ProgressReporter)
		if !ok || r.progressOff[i] {
			continue
		}
		err := pr.Progress(connector.Request{ID: r.engID, Blocks: l.rankLists(i, r.blocks[:final], len(r.tokens)),
			Tokens: len(r.tokens), TransferID: r.tid})
		if err != nil {
			r.progressOff[i] = true
			l.s.log.Debug("progress report refused; the request moves at its finish", zap.String("request_id", r.engID), zap.Int("rank", i), zap.Error(err))
			continue
		}
		r.progressed[i] = true
	}
}

// abortProgress ends a request cancelled during its prefill after it
// reported progress: the ranks that took a report hold its blocks until
// their DrainFreed says so. It reports whether any did.
func (l *loop) abortProgress(r *request) bool {
	h := &heldReq{blocks: r.blocks, freed: make([]bool, len(l.s.prods))}
	for i, p := range l.s.prods {
		if i < len(r.progressed) && r.progressed[i] {
			h.left++
			p.Abort(r.engID)
			continue
		}
		h.freed[i] = true
	}
	if h.left == 0 {
		return false
	}
	r.blocks = nil
	l.held[r.engID] = h
	return true
}
