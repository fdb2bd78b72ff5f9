package server

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/pullconn"
)

// Bidirectional KV for multi-turn chats (Config.Bidirectional, pull only;
// vLLM's bidirectional_kv_xfer). A decode request that asks for it
// (kv_history_export: true, the proxy's extension) keeps the full blocks
// of its prompt when it finishes, held by a pullconn.HistoryExporter for
// Config.HistoryTTL, and answers their Params as kv_transfer_params (in
// the whole answer, or in a last stream chunk with no choices). The next
// turn's prefill request carries them as kv_history_params: the prefill
// engine reads those blocks back (a pullconn.HistoryReader, D->P) into
// the first blocks of its prompt, checks every byte against the prompt's
// pattern, and computes (and is modeled to spend time on) only the tokens
// after them. A history shorter than Config.RecomputeThreshold, a failed
// read or a wrong byte is recomputed, and counted.
//
// The reference decode keeps the KV of the prompt it loaded, not of the
// tokens it generated (its output words do not tokenize back to the ids it
// generated), so what the next turn reads back is the previous turn's
// prompt; the previous reply is recomputed with the new message.

// historyRoles are the D->P roles of an engine, one per TP rank, each on
// its own agent over the rank's KV memory.
type historyRoles struct {
	readers   []*pullconn.HistoryReader   // prefill
	exporters []*pullconn.HistoryExporter // decode
	read      atomic.Uint64               // history tokens read back
	recompute atomic.Uint64               // history tokens offered but recomputed
	exported  atomic.Uint64               // decode: turns held for the next one
}

// addHistoryRank starts rank r's D->P role when the engine is
// bidirectional.
func (s *Server) addHistoryRank(e *connector.Engine, r int, rc connector.RankConfig) error {
	if !s.cfg.Bidirectional || s.cfg.Connector != ConnPull {
		return nil
	}
	a, err := s.cfg.NewAgent(fmt.Sprintf("%s-tp%d-hist", s.cfg.EngineID, r))
	if err != nil {
		return fmt.Errorf("engine: history agent of rank %d: %w", r, err)
	}
	s.agents = append(s.agents, a)
	rc.Agent, rc.Lease = a, 0
	if s.cfg.Role == RolePrefill {
		h, err := pullconn.NewHistoryReader(e, pullconn.Config{RankConfig: rc}, s.cfg.RecomputeThreshold)
		if err != nil {
			return err
		}
		s.hist.readers = append(s.hist.readers, h)
		return nil
	}
	rc.Lease = s.cfg.HistoryTTL
	h, err := pullconn.NewHistoryExporter(e, pullconn.Config{RankConfig: rc})
	if err != nil {
		return err
	}
	s.hist.exporters = append(s.hist.exporters, h)
	return nil
}

// closeHistory closes the D->P roles; their last results and frees come
// out of the loop's next poll.
func (s *Server) closeHistory() {
	for _, h := range s.hist.readers {
		h.Close()
	}
	for _, h := range s.hist.exporters {
		h.Close()
	}
}

// historyReq is a request's part in bidirectional KV.
type historyReq struct {
	params  *pullconn.Params // prefill: the history to read back
	export  bool             // decode: hold the prompt for the next turn
	blocks  int              // prefill: blocks the history fills
	read    int              // prefill: tokens read back (not computed)
	started []bool           // prefill: ranks reading
	left    int
	failed  error
	reading bool
	// checking is the time the byte check of the history took: the
	// prefill's modeled time includes it, as decode's step does its load's.
	checking time.Duration
}

// parseHistory reads the request's bidirectional fields.
func (s *Server) parseHistory(cf *commonFields, r *request) *fieldError {
	raw := bytes.TrimSpace(cf.KVHistoryParams)
	if len(raw) > 0 && string(raw) != "null" {
		if r.kind != kindPrefill || len(s.hist.readers) == 0 {
			return badRequest("kv_history_params", "kv_history_params was sent to an engine that does not read history back; send it on the prefill leg to a pull prefill engine started with bidirectional KV.")
		}
		var p pullconn.Params
		if e := decodeJSON(raw, &p, "kv_history_params."); e != nil {
			return e
		}
		if err := p.Validate(); err != nil {
			return badRequest("kv_history_params", "kv_history_params: %v; pass on the decode answer's kv_transfer_params unchanged.", err)
		}
		r.hist.params = &p
	}
	if cf.KVHistoryExport {
		if r.kind != kindDecode || len(s.hist.exporters) == 0 {
			return badRequest("kv_history_export", "kv_history_export was sent to an engine that does not export history; send it on the decode leg to a pull decode engine started with bidirectional KV.")
		}
		r.hist.export = true
	}
	return nil
}

// startHistory starts reading a prefill request's history back, and says
// whether it did (the request then waits in histLoading).
func (l *loop) startHistory(r *request) bool {
	p := r.hist.params
	if p == nil {
		return false
	}
	bs := l.s.cfg.Model.BlockSize
	if p.NumTokens >= len(r.tokens) || p.NumTokens%bs != 0 {
		// Not a prefix this engine can take whole (it must compute at least
		// the last token): recomputed; decode's hold ends at its TTL.
		l.s.hist.recompute.Add(uint64(p.NumTokens))
		l.s.log.Info("history not read back: not a whole-block prefix of the prompt", zap.String("request_id", r.engID), zap.Int("history_tokens", p.NumTokens), zap.Int("prompt_tokens", len(r.tokens)))
		return false
	}
	r.hist.blocks = p.NumTokens / bs
	r.hist.started = make([]bool, len(l.s.hist.readers))
	for i, h := range l.s.hist.readers {
		reads, err := h.LoadHistory(r.engID, *p, r.blocks[:r.hist.blocks])
		if err != nil {
			if r.hist.failed == nil {
				r.hist.failed = fmt.Errorf("rank %d: %w", i, err)
			}
			continue
		}
		r.hist.reading = reads
		r.hist.started[i] = true
		r.hist.left++
	}
	if r.hist.failed != nil {
		l.abortHistory(r)
	}
	r.state = stLoading
	l.histLoading[r.engID] = r
	if r.hist.left == 0 {
		l.historyEnded(r)
	}
	return true
}

func (l *loop) abortHistory(r *request) {
	for i, h := range l.s.hist.readers {
		if r.hist.started[i] {
			h.Abort(r.engID)
		}
	}
}

// pollHistory takes the D->P roles' results and frees.
func (l *loop) pollHistory() {
	for i, h := range l.s.hist.readers {
		for _, res := range h.Drain() {
			r := l.histLoading[res.RequestID]
			if r == nil || !r.hist.started[i] {
				continue
			}
			r.hist.started[i] = false
			r.hist.left--
			if res.Err != nil && r.hist.failed == nil {
				r.hist.failed = fmt.Errorf("rank %d: %w", i, res.Err)
				l.abortHistory(r)
			}
			if r.hist.left == 0 {
				l.historyEnded(r)
			}
		}
	}
	for i, h := range l.s.hist.exporters {
		for _, id := range h.DrainFreed() {
			l.freed(i, id)
		}
	}
}

// historyEnded checks the history read back and queues the prefill of the
// rest (or of everything).
func (l *loop) historyEnded(r *request) {
	delete(l.histLoading, r.engID)
	if r.aborting {
		l.release(r)
		if r.abortErr != nil {
			l.fail(r, r.abortErr)
		} else {
			l.gone(r)
		}
		return
	}
	n := r.hist.blocks * l.s.cfg.Model.BlockSize
	switch {
	case r.hist.failed != nil:
		l.s.log.Warn("history read back failed: recomputing it", zap.String("request_id", r.engID), zap.Error(r.hist.failed))
		l.s.hist.recompute.Add(uint64(n))
	case !r.hist.reading:
		l.s.hist.recompute.Add(uint64(n)) // below the threshold
	default:
		start := time.Now()
		defer func() { r.hist.checking = time.Since(start) }()
		var ok, bad uint64
		var first string
		for i := range l.s.lays {
			c := checkKV(&l.s.lays[i], l.s.bufs[i].Bytes(), r.blocks[:r.hist.blocks], r.ph[:n])
			ok, bad = ok+c.okBytes, bad+c.badBytes
			if first == "" {
				first = c.first
			}
		}
		l.s.st.verified.Add(ok)
		if bad > 0 {
			l.s.st.verifyFail.Add(1)
			l.s.log.Error("history KV read back does not match the prompt: recomputing it", zap.String("request_id", r.engID), zap.Uint64("bad_bytes", bad), zap.String("first", first))
			l.s.hist.recompute.Add(uint64(n))
			break
		}
		r.hist.read = n
		l.s.hist.read.Add(uint64(n))
	}
	r.state = stPrefill
	l.prefillQ = append(l.prefillQ, r)
}

// cancelHistory ends a cancelled request's history load; false if it has
// none.
func (l *loop) cancelHistory(r *request, answer *apiError) bool {
	if l.histLoading[r.engID] != r {
		return false
	}
	if !r.aborting {
		r.aborting, r.abortErr = true, answer
		l.abortHistory(r)
	}
	return true
}

// stopHistory aborts every history load (the engine is closing).
func (l *loop) stopHistory(answer *apiError) {
	for _, r := range l.histLoading {
		l.cancelHistory(r, answer)
	}
}

// finishDecode ends a decode request's blocks: released, or (with
// kv_history_export) its prompt's full blocks held for the next turn, whose
// Params it returns.
func (l *loop) finishDecode(r *request) any {
	full := len(r.tokens) / l.s.cfg.Model.BlockSize
	if !r.hist.export || full == 0 {
		l.release(r)
		return nil
	}
	h := &heldReq{blocks: r.blocks[:full], freed: make([]bool, len(l.s.hist.exporters))}
	var params any
	var ferr error
	for i, ex := range l.s.hist.exporters {
		p, err := ex.ExportTurn(r.engID, h.blocks, full*l.s.cfg.Model.BlockSize)
		if err != nil {
			ferr = fmt.Errorf("rank %d: %w", i, err)
			h.freed[i] = true
			continue
		}
		h.left++
		if i == 0 {
			params = p
		}
	}
	l.freeBlocks(r.blocks[full:])
	r.blocks = nil
	if ferr != nil {
		// A turn some rank does not hold cannot be read back whole.
		for i, ex := range l.s.hist.exporters {
			if !h.freed[i] {
				ex.Abort(r.engID)
			}
		}
		l.s.log.Warn("history not exported", zap.String("request_id", r.engID), zap.Error(ferr))
		params = nil
	}
	if h.left == 0 {
		l.freeBlocks(h.blocks)
	} else {
		l.held[r.engID] = h
	}
	if params != nil {
		l.s.hist.exported.Add(1)
	}
	return params
}

// writeKVFrom is writeKV for blocks[first:] only: the blocks before hold
// history read back.
func writeKVFrom(l *descriptors.Layout, mem []byte, blocks []int, ph []uint64, first int) {
	if first == 0 {
		writeKV(l, mem, blocks, ph)
		return
	}
	off := first * l.BlockSize
	visitRows(l, mem, blocks[first:], func(row []byte, region, head, t int) {
		if t += off; t < len(ph) {
			fillRow(row, ph[t], region, head, t)
		} else {
			clear(row)
		}
	})
}

// kvParamsChunk is the last chunk of a chat stream whose decode exported
// its history: no choices, the Params the proxy passes to the next turn.
func kvParamsChunk(a answer, params any) (any, bool) {
	ca, ok := a.(*chatAnswer)
	if !ok || params == nil {
		return nil, false
	}
	c := ca.chunk()
	c.Choices, c.KVTransferParams = []chatChoice{}, params
	return c, true
}

// historyStats are the engine's bidirectional counters.
func (s *Server) historyStats(st *Stats) {
	st.HistoryTokensRead, st.HistoryTokensRecomputed, st.HistoryExported = s.hist.read.Load(), s.hist.recompute.Load(), s.hist.exported.Load()
}

// heldForDecode is how many holds a closing engine waits for: a prefill's,
// which a decode engine is to read. A decode's exported turns are not
// waited for: the next turn may never come, and it recomputes if they go.
func (l *loop) heldForDecode() int {
	if l.s.cfg.Role == RoleDecode {
		return 0
	}
	return len(l.held)
}

// PrefillFrom is the modeled time of a prefill of tokens [from, n) of a
// prompt whose tokens before from are in the KV cache already (history read
// back): the weights' part for n-from tokens, and causal attention of those
// tokens over the whole prefix, which still grows with n.
func (c ComputeModel) PrefillFrom(from, n int) time.Duration {
	k := time.Duration(n - from)
	return c.PrefillBase + c.PrefillPerToken*k + c.PrefillPerToken2*(time.Duration(n)*time.Duration(n)-time.Duration(from)*time.Duration(from))/1000
}
