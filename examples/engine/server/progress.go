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
//
// With Config.ProgressLayers each chunk's time is split evenly over the
// model's layers, and after each layer the chunk's blocks are reported
// final in the layers done (connector.Request.FinalLayers), the last
// layer's report being the chunk's whole one. The last chunk reports its
// layers too, all the prompt's blocks, but its last layer, which
// RequestFinished gives. That is chunks x layers reports per request and
// rank, less one: 8 x 64 - 1 = 511 for a 16k prompt of Qwen3-32B in
// chunks of 2048, each one connector call with no allocation of the
// engine's (rankLists' one list is reused).

// computeChunks sleeps through the batch's chunks from start, reporting
// each chunk's final blocks, per layer with ProgressLayers, but the last
// chunk's last layer (RequestFinished gives those).
func (l *loop) computeChunks(batch []*request, start time.Time) {
	c, bs := l.s.cfg.Compute, l.s.cfg.Model.BlockSize
	layers := 1
	if l.s.cfg.ProgressLayers {
		layers = l.s.cfg.Model.Layers
	}
	at := c.PrefillBase
	for _, r := range batch {
		n := len(r.tokens)
		chunk := l.s.cfg.ProgressChunk
		if chunk == 0 { // ProgressLayers alone: the prompt is one chunk
			chunk = n
		}
		reported := 0 // blocks reported final in every layer
		for from := r.hist.read; from < n; from += chunk {
			to := min(from+chunk, n)
			d := c.PrefillFrom(from, to) - c.PrefillBase
			final, last := to/bs, to == n
			if last {
				final = r.promptBlocks // the prompt ends: its last block is complete
			}
			if r.kind == kindPrefill && final > reported && (layers > 1 || !last) {
				for done := 1; done <= layers; done++ {
					if last && done == layers {
						break
					}
					if rest := at + d*time.Duration(done)/time.Duration(layers) - time.Since(start); rest > 0 {
						time.Sleep(rest)
					}
					l.reportProgress(r, final, done)
				}
				reported = final
			}
			at += d
		}
	}
}

// reportProgress reports request r's first final blocks, final in the
// model's first done layers (done is ignored without ProgressLayers), to
// every rank that takes progress; a rank that refuses is not asked again
// for r. A rank of a pipeline stage is told of its own layers only: after
// a layer of its stage, FinalLayers counts from its first; after its last
// one, the blocks are final in every layer of it, and later layers tell it
// nothing more.
func (l *loop) reportProgress(r *request, final, done int) {
	if r.progressed == nil {
		r.progressed, r.progressOff = make([]bool, len(l.s.prods)), make([]bool, len(l.s.prods))
	}
	for i, p := range l.s.prods {
		pr, ok := p.(connector.ProgressReporter)
		if !ok || r.progressOff[i] {
			continue
		}
		finalLayers := 0
		if l.s.cfg.ProgressLayers {
			lay := &l.s.lays[i]
			own := done - lay.FirstLayer
			if own <= 0 || own > lay.NumLayers {
				continue // not this stage's layer yet, or the stage was reported whole
			}
			if own < lay.NumLayers {
				finalLayers = own
			}
		}
		err := pr.Progress(connector.Request{ID: r.engID, Blocks: l.progressLists(i, r.blocks[:final], len(r.tokens)),
			Tokens: len(r.tokens), TransferID: r.tid, FinalLayers: finalLayers})
		if err != nil {
			l.s.st.progressRefused.Add(1)
			r.progressOff[i] = true
			l.s.log.Debug("progress report refused; the request moves at its finish", zap.String("request_id", r.engID), zap.Int("rank", i), zap.Error(err))
			continue
		}
		l.s.st.progressTaken.Add(1)
		r.progressed[i] = true
	}
}

// progressLists is rankLists for a progress report: a layout without
// groups gets the loop's one list, reused from report to report (a
// connector keeps no caller's slice past its call).
func (l *loop) progressLists(i int, blocks []int, tokens int) [][]int {
	if len(l.s.lays[i].Groups) > 0 {
		return l.rankLists(i, blocks, tokens)
	}
	if l.oneList == nil {
		l.oneList = make([][]int, 1)
	}
	l.oneList[0] = blocks
	return l.oneList
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
