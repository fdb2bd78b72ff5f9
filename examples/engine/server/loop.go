package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonixl/gonixl/connector"
	"go.uber.org/zap"
)

type kind int

const (
	kindLocal   kind = iota // prefill and decode here
	kindPrefill             // prefill for a remote decode
	kindDecode              // decode of a remote prefill
)

func (k kind) String() string { return [...]string{"local", "prefill", "decode"}[k] }

type state int

const (
	stWaiting state = iota // queued for blocks
	stPrefill              // admitted, prefill to run
	stLoading              // decode: KV on its way
	stRunning              // decoding
	stDone                 // answered, or the client left
)

// event is what the engine loop tells a request's handler: a token, or the
// end (err, or done with the kv_transfer_params to answer).
type event struct {
	tok int
	// finish is set on the request's last token: "length" (max_tokens
	// reached) or "stop" (the reply script ended, or a stop token id came);
	// stopReason is then the stop token id, else nil (replies.go).
	finish     string
	stopReason any
	end        bool
	err        *apiError
	params     any
}

type request struct {
	id, engID string // X-Request-Id; the engine's id (id + "-" + 8 hex)
	kind      kind
	tokens    []int
	ph        []uint64
	maxTokens int
	// gen is how the request's tokens are made and when it stops
	// (replies.go).
	gen generation
	// promptParam and maxTokensParam are the request fields the prompt and
	// max_tokens came from (commonFields), for the errors about them.
	promptParam, maxTokensParam string
	tid                         string
	params                      connector.Params // decode: the leg's kv_transfer_params
	arrival                     time.Time
	deadline                    time.Time
	events                      chan event // large enough that the loop never blocks

	// Owned by the engine loop.
	state        state
	blocks       []int
	promptBlocks int
	keptAlive    bool
	started      []bool // decode: ranks whose Load/Register was accepted
	ranksLeft    int
	loadErr      error
	refused      bool // a rank refused the load: no recompute
	ranksAborted bool
	aborting     bool      // the loop ended the load; the connector's results free the blocks
	progressed   []bool    // prefill: ranks that took a progress report (they hold the blocks)
	progressOff  []bool    // prefill: ranks that refused one (not asked again)
	abortErr     *apiError // what to answer then (nil: the client is gone)
	checksum     uint64
	generated    int
	lastTok      time.Time
	hist         historyReq // bidirectional KV (bidir.go)
	// trace is the request's span's context (trace.go), given to the
	// ranks with it; nil when no trace is recorded.
	trace context.Context
	// abort closes when abort_requests names the request (abort.go); nil
	// for requests that cannot be aborted so.
	abort     chan struct{}
	abortOnce sync.Once
	// computeFrom is when the request could start computing (admitted to
	// prefill; decode: its KV in and verified), the start of its
	// first_token span; zero when not traced.
	computeFrom time.Time
}

type heldReq struct {
	blocks []int
	freed  []bool
	left   int
}

// loop is the engine's scheduler; one goroutine runs it.
type loop struct {
	s        *Server
	free     []int
	waiting  []*request
	prefillQ []*request
	running  []*request
	loading  map[string]*request
	held     map[string]*heldReq
	// histLoading are prefill requests reading their history back.
	histLoading map[string]*request
	pending     atomic.Int64         // waitHeld's view: held + loading, last step
	drained     [][]connector.Result // drainConsumers' results, reused
	oneList     [][]int              // progressLists' one list, reused
	// verifying is the time spent checking loaded KV since the last decode
	// step; the next step's modeled time includes it, as a real engine
	// spends none.
	verifying time.Duration
}

func newLoop(s *Server) *loop {
	l := &loop{s: s, loading: map[string]*request{}, held: map[string]*heldReq{}, histLoading: map[string]*request{}}
	for b := range s.cfg.NumBlocks {
		l.free = append(l.free, b) // allocations take 0, 1, 2, ... at first
	}
	return l
}

func (l *loop) run() {
	defer close(l.s.loopDone)
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	for {
		busy := len(l.prefillQ) > 0 || len(l.running) > 0
		if !busy {
			wait := time.Duration(-1)
			switch {
			case len(l.loading) > 0 || len(l.held) > 0 || len(l.histLoading) > 0:
				wait = time.Millisecond
			case len(l.waiting) > 0:
				wait = 20 * time.Millisecond
			}
			var tc <-chan time.Time
			if wait > 0 {
				idle.Reset(wait)
				tc = idle.C
			}
			select {
			case r := <-l.s.submitCh:
				l.submit(r)
			case r := <-l.s.cancelCh:
				l.cancelled(r)
			case <-l.s.stopCh:
				l.stop()
				return
			case <-tc:
			}
			if !idle.Stop() && tc != nil {
				select {
				case <-idle.C:
				default:
				}
			}
		}
		for more := true; more; {
			select {
			case r := <-l.s.submitCh:
				l.submit(r)
			case r := <-l.s.cancelCh:
				l.cancelled(r)
			case <-l.s.stopCh:
				l.stop()
				return
			default:
				more = false
			}
		}
		l.expire()
		l.pollConnectors()
		l.admit()
		l.prefillStep()
		l.pollConnectors()
		l.decodeStep()
		l.gauges()
	}
}

func (l *loop) gauges() {
	st := &l.s.st
	st.blocks.Store(int64(l.s.cfg.NumBlocks - len(l.free)))
	st.running.Store(int64(len(l.running) + len(l.prefillQ)))
	st.waiting.Store(int64(len(l.waiting) + len(l.loading)))
	l.pending.Store(int64(l.heldForDecode() + len(l.loading) + len(l.histLoading)))
}

// waitHeld waits until no block is held for a remote decode and no load is
// ending, or until ctx ends; tick (if not nil) runs every 5 ms meanwhile.
func (l *loop) waitHeld(ctx context.Context, tick func()) {
	for {
		if l.pending.Load() == 0 {
			return
		}
		if tick != nil {
			tick()
		}
		select {
		case <-ctx.Done():
			return
		case <-l.s.loopDone:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (l *loop) needBlocks(r *request) int {
	if r.kind == kindPrefill {
		return r.promptBlocks
	}
	return blocksFor(len(r.tokens)+r.maxTokens, l.s.cfg.Model.BlockSize)
}

func (l *loop) submit(r *request) {
	r.promptBlocks = blocksFor(len(r.tokens), l.s.cfg.Model.BlockSize)
	if n := l.needBlocks(r); n > l.s.cfg.NumBlocks {
		l.fail(r, l.tooLong(r, n))
		return
	}
	if len(l.waiting) >= l.s.cfg.MaxWaiting {
		l.fail(r, &apiError{http.StatusServiceUnavailable, "server_error", "engine overloaded: too many requests waiting", ""})
		return
	}
	r.state = stWaiting
	l.waiting = append(l.waiting, r)
}

func (l *loop) alloc(n int) []int {
	b := make([]int, n)
	for i := range b {
		b[i] = l.free[i]
	}
	l.free = l.free[n:]
	return b
}

func (l *loop) release(r *request) {
	l.freeBlocks(r.blocks)
	r.blocks = nil
}

// freeBlocks returns blocks to the free queue as vLLM's block pool does:
// allocations take the queue's head, a request's blocks go to its tail last
// block first (vLLM frees in reverse so that a request's tail, the least
// likely to be shared, is reused first). So a request's blocks are
// contiguous while the queue has never-used blocks, and come in descending
// runs after that; gonixl's connectors coalesce only ascending runs, so the
// descriptors a transfer needs grow as the engine runs, as they do in vLLM.
func (l *loop) freeBlocks(blocks []int) {
	for i := len(blocks) - 1; i >= 0; i-- {
		l.free = append(l.free, blocks[i])
	}
}

func (l *loop) active() int { return len(l.running) + len(l.prefillQ) + len(l.loading) }

func (l *loop) admit() {
	for len(l.waiting) > 0 {
		r := l.waiting[0]
		if l.needBlocks(r) > len(l.free) || (r.kind != kindPrefill && l.active() >= l.s.cfg.MaxBatch) {
			break
		}
		l.waiting = l.waiting[1:]
		r.blocks = l.alloc(l.needBlocks(r))
		if r.kind == kindDecode {
			l.startLoad(r)
		} else if !l.startHistory(r) {
			r.state = stPrefill
			r.markCompute()
			l.prefillQ = append(l.prefillQ, r)
		}
	}
	// Decode requests that wait for blocks keep prefill's hold alive
	// (pull; push has none to keep).
	for _, r := range l.waiting {
		if r.kind == kindDecode && !r.keptAlive {
			r.keptAlive = true
			for i, c := range l.s.conss {
				if err := c.KeepAlive(l.connRequest(i, r)); err != nil {
					l.s.log.Warn("KeepAlive", zap.String("request_id", r.engID), zap.Int("tp_rank", i), zap.Error(err))
				}
			}
		}
	}
}

func (l *loop) startLoad(r *request) {
	r.state = stLoading
	l.loading[r.engID] = r
	r.started = make([]bool, len(l.s.conss))
	r.ranksLeft = len(l.s.conss)
	for i, err := range l.startRanks(r) {
		if err != nil {
			r.ranksLeft--
			if r.loadErr == nil {
				r.loadErr = fmt.Errorf("rank %d: %w", i, err)
			}
			r.refused = true
			continue
		}
		r.started[i] = true
	}
	if r.loadErr != nil {
		l.abortRanks(r)
	}
	if r.ranksLeft == 0 {
		l.loadEnded(r)
	}
}

// tooLong is the answer to a request that needs n blocks, more than the
// engine has: about the prompt when the prompt alone does not fit (or the
// request is a prefill leg, which generates one token), else about the
// token limit, with what would fit.
func (l *loop) tooLong(r *request, n int) *apiError {
	bs, total := l.s.cfg.Model.BlockSize, l.s.cfg.NumBlocks
	if r.kind == kindPrefill || r.promptBlocks >= total {
		return &apiError{http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("%s is %d tokens, %d KV blocks of %d tokens, and the engine has %d blocks (%d tokens in all); send a shorter prompt.",
				r.promptParam, len(r.tokens), r.promptBlocks, bs, total, total*bs), r.promptParam}
	}
	fit := total*bs - len(r.tokens)
	return &apiError{http.StatusBadRequest, "invalid_request_error",
		fmt.Sprintf("%s is %d: the request needs %d KV blocks of %d tokens (prompt %d + %s %d) and the engine has %d; ask for at most %d tokens.",
			r.maxTokensParam, r.maxTokens, n, bs, len(r.tokens), r.maxTokensParam, r.maxTokens, total, fit), r.maxTokensParam}
}

func (l *loop) loadError(r *request, err error) *apiError {
	if errors.Is(err, connector.ErrIncompatible) {
		return l.incompatible(r, err)
	}
	if errors.Is(err, connector.ErrInvalid) {
		param, msg := kvError(err)
		return &apiError{http.StatusBadRequest, "invalid_request_error", msg + "; pass on the prefill answer's kv_transfer_params unchanged.", param}
	}
	return &apiError{http.StatusInternalServerError, "server_error", "KV transfer failed: " + err.Error(), ""}
}

// incompatible is the answer to a load the connector refused because the two
// engines cannot exchange KV (different layers, heads, dtype, block size,
// connector, model): a deployment mistake, the operator's to fix, so a 502
// naming both engines and what differs rather than a 400 that would send the
// client looking at its request.
func (l *loop) incompatible(r *request, err error) *apiError {
	prefill := r.params.RemoteEngineID
	why := err.Error()
	for _, prefix := range []string{"pullconn: ", "pushconn: "} {
		why = strings.ReplaceAll(why, prefix, "")
	}
	return &apiError{http.StatusBadGateway, "server_error",
		fmt.Sprintf("decode engine %q cannot take KV from prefill engine %q: %s (source: the prefill engine, destination: the decode engine). "+
			"The engines are deployed with different KV caches: start both engines with the same model (layers, KV heads, head size, dtype, block size) and connector.",
			l.s.cfg.EngineID, prefill, why), ""}
}

// abortLoad ends a load early for good; its blocks come back with the
// ranks' results.
func (l *loop) abortLoad(r *request, answer *apiError) {
	if r.aborting {
		return
	}
	r.aborting, r.abortErr = true, answer
	l.abortRanks(r)
}

// abortRanks ends the load on every rank still loading it.
func (l *loop) abortRanks(r *request) {
	if r.ranksAborted {
		return
	}
	r.ranksAborted = true
	for i, c := range l.s.conss {
		if r.started[i] {
			if err := c.Abort(r.engID); err != nil {
				l.s.log.Warn("Abort", zap.String("request_id", r.engID), zap.Int("tp_rank", i), zap.Error(err))
			}
		}
	}
}

func (l *loop) pollConnectors() {
	for i, results := range l.drainConsumers() {
		for _, res := range results {
			r := l.loading[res.RequestID]
			if r == nil || !r.started[i] {
				l.s.log.Debug("connector result for no loading request", zap.String("request_id", res.RequestID), zap.Error(res.Err))
				continue
			}
			r.started[i] = false
			r.ranksLeft--
			if res.Err != nil && r.loadErr == nil {
				r.loadErr = fmt.Errorf("rank %d: %w", i, res.Err)
				l.abortRanks(r)
			}
			if r.ranksLeft == 0 {
				l.loadEnded(r)
			}
		}
	}
	for i, p := range l.s.prods {
		for _, id := range p.DrainFreed() {
			l.freed(i, id)
		}
	}
	l.pollHistory()
}

// startRanks starts the request's load on every rank.
func (l *loop) startRanks(r *request) []error {
	errs := make([]error, len(l.s.conss))
	l.eachConsumer(func(i int, c connector.Consumer) { errs[i] = c.Load(l.connRequest(i, r)) })
	return errs
}

// connRequest is request r as rank i's connector takes it: the rank's
// lists of the prompt's blocks (one per KV-cache group of its layout),
// none while r waits for blocks (KeepAlive).
func (l *loop) connRequest(i int, r *request) connector.Request {
	req := connector.Request{ID: r.engID, Tokens: len(r.tokens), TransferID: r.tid, Params: r.params, Context: r.trace}
	if r.blocks != nil {
		req.Blocks = l.rankLists(i, r.blocks[:r.promptBlocks], len(r.tokens))
	}
	return req
}

// rankLists returns blocks, a request of tokens tokens, as rank i's lists:
// one per KV-cache group of its layout (groupLists), or the one list.
func (l *loop) rankLists(i int, blocks []int, tokens int) [][]int {
	if lay := &l.s.lays[i]; len(lay.Groups) > 0 {
		return groupLists(lay, blocks, tokens)
	}
	return [][]int{blocks}
}

// drainConsumers takes every rank's results, into a slice the next call
// reuses.
func (l *loop) drainConsumers() [][]connector.Result {
	if len(l.drained) != len(l.s.conss) {
		l.drained = make([][]connector.Result, len(l.s.conss))
	}
	l.eachConsumer(func(i int, c connector.Consumer) { l.drained[i] = c.Drain() })
	return l.drained
}

// eachConsumer calls f for every rank's consumer and returns when all
// returned. With Inline the ranks run side by side: a rank's Load and Drain
// then post its READs, which costs real time per descriptor on a native
// agent, and a TP worker of vLLM posts its own rank's READs in its own
// process, its step waiting for the slowest worker.
func (l *loop) eachConsumer(f func(i int, c connector.Consumer)) {
	if !l.s.cfg.Inline || len(l.s.conss) < 2 {
		for i, c := range l.s.conss {
			f(i, c)
		}
		return
	}
	var wg sync.WaitGroup
	for i, c := range l.s.conss {
		wg.Go(func() { f(i, c) })
	}
	wg.Wait()
}

func (l *loop) freed(rank int, id string) {
	h := l.held[id]
	if h == nil || h.freed[rank] {
		return
	}
	h.freed[rank] = true
	if h.left--; h.left == 0 {
		l.freeBlocks(h.blocks)
		delete(l.held, id)
	}
}

func (l *loop) loadEnded(r *request) {
	delete(l.loading, r.engID)
	switch {
	case r.aborting:
		l.release(r)
		if r.abortErr != nil {
			l.fail(r, r.abortErr)
		} else {
			l.gone(r)
		}
	case r.loadErr != nil && !r.refused && l.s.cfg.FailurePolicy == "recompute":
		l.s.st.recomputed.Add(1)
		l.s.log.Warn("KV load failed: recomputing the prompt", zap.String("request_id", r.engID), zap.Error(r.loadErr))
		r.state = stPrefill
		r.markCompute()
		l.prefillQ = append(l.prefillQ, r)
	case r.loadErr != nil:
		l.release(r)
		l.fail(r, l.loadError(r, r.loadErr))
	default:
		t := time.Now()
		l.verify(r)
		l.verifying += time.Since(t) // inside the next decode step's modeled time
		r.state = stRunning
		r.markCompute()
		l.running = append(l.running, r)
	}
}

// verify checks decode's KV against the prompt and sets the checksum the
// output tokens come from.
func (l *loop) verify(r *request) {
	var sum, ok, bad uint64
	var first string
	for i := range l.s.lays {
		c := checkKV(&l.s.lays[i], l.s.bufs[i].Bytes(), r.blocks[:r.promptBlocks], r.ph)
		sum += c.checksum
		ok += c.okBytes
		bad += c.badBytes
		if first == "" {
			first = c.first
		}
	}
	r.checksum = sum
	l.s.st.verified.Add(ok)
	if bad > 0 {
		l.s.st.verifyFail.Add(1)
		l.s.log.Error("KV verification failed: decoding with the KV received", zap.String("request_id", r.engID),
			zap.Uint64("bad_bytes", bad), zap.Uint64("good_bytes", ok), zap.String("first", first))
	}
}

func (l *loop) prefillStep() {
	if len(l.prefillQ) == 0 {
		return
	}
	n, tokens := 0, 0
	for n < len(l.prefillQ) && (n == 0 || tokens+len(l.prefillQ[n].tokens) <= l.s.cfg.PrefillTokenBudget) {
		tokens += len(l.prefillQ[n].tokens)
		n++
	}
	batch := l.prefillQ[:n:n]
	l.prefillQ = l.prefillQ[n:]
	c := l.s.cfg.Compute
	d := c.PrefillBase
	for _, r := range batch {
		// History read back is not computed, and checking it, which a real
		// engine does not do, is inside the modeled time.
		d += c.PrefillFrom(r.hist.read, len(r.tokens)) - c.PrefillBase - r.hist.checking
	}
	// The KV bytes are made first, inside the modeled time: they are what
	// the GPU computes, and on a small machine making them is not free.
	start := time.Now()
	for _, r := range batch {
		l.computeKV(r)
	}
	if d > 0 {
		if l.s.cfg.ProgressChunk > 0 || l.s.cfg.ProgressLayers {
			l.computeChunks(batch, start)
		}
		if rest := d - time.Since(start); rest > 0 {
			time.Sleep(rest)
		}
		l.takeCancels() // a client that left during the prefill gets no hold
	}
	for _, r := range batch {
		if r.state != stPrefill {
			continue
		}
		if r.kind == kindPrefill {
			l.finishPrefill(r)
			continue
		}
		if l.emit(r) {
			l.release(r)
			l.done(r, nil)
		} else {
			r.state = stRunning
			l.running = append(l.running, r)
		}
	}
}

// computeKV writes a prefilled request's KV into its blocks on every rank
// and sets the checksum its output comes from.
func (l *loop) computeKV(r *request) {
	blocks := r.blocks[:r.promptBlocks]
	for i := range l.s.lays {
		writeKVFrom(&l.s.lays[i], l.s.bufs[i].Bytes(), blocks, r.ph, r.hist.read/l.s.cfg.Model.BlockSize)
		if l.s.cfg.KVHook != nil && r.kind == kindPrefill {
			l.s.cfg.KVHook(r.engID, i, l.s.lays[i], blocks, l.s.bufs[i].Bytes())
		}
	}
	var sum uint64
	for i := range l.s.lays {
		sum += checkKV(&l.s.lays[i], l.s.bufs[i].Bytes(), blocks, r.ph).checksum
	}
	r.checksum = sum
}

// finishPrefill hands a prefilled request's blocks to the connector.
func (l *loop) finishPrefill(r *request) {
	h := &heldReq{blocks: r.blocks, freed: make([]bool, len(l.s.prods))}
	r.blocks = nil
	var params any
	var ferr error
	for i, p := range l.s.prods {
		ps, err := p.RequestFinished(connector.Request{ID: r.engID, Blocks: l.rankLists(i, h.blocks[:r.promptBlocks], len(r.tokens)),
			Tokens: len(r.tokens), TransferID: r.tid, Context: r.trace})
		if err != nil {
			if ferr == nil {
				ferr = fmt.Errorf("rank %d: %w", i, err)
			}
			if i < len(r.progressed) && r.progressed[i] {
				h.left++ // it holds the blocks from its progress reports: freed after the Abort below
				continue
			}
			h.freed[i] = true
			continue
		}
		h.left++
		if i == 0 {
			params = ps
		}
	}
	if h.left == 0 {
		l.freeBlocks(h.blocks)
	} else {
		l.held[r.engID] = h
	}
	if ferr != nil {
		for i, p := range l.s.prods {
			if !h.freed[i] {
				p.Abort(r.engID)
			}
		}
		l.fail(r, &apiError{http.StatusInternalServerError, "server_error", "KV hand-off failed: " + ferr.Error(), ""})
		return
	}
	l.emit(r)
	l.done(r, params)
}

func (l *loop) decodeStep() {
	if len(l.running) == 0 {
		return
	}
	ctxTokens := 0
	for _, r := range l.running {
		ctxTokens += len(r.tokens) + r.generated
	}
	if d := l.s.cfg.Compute.Decode(len(l.running), ctxTokens) - l.verifying; d > 0 {
		time.Sleep(d)
	}
	l.verifying = 0
	keep := l.running[:0]
	for _, r := range l.running {
		if l.emit(r) {
			l.done(r, l.finishDecode(r))
			continue
		}
		keep = append(keep, r)
	}
	clear(l.running[len(keep):])
	l.running = keep
}

// emit generates the request's next token; last: it was the request's
// last.
func (l *loop) emit(r *request) (last bool) {
	now := l.s.cfg.Clock.Now()
	if r.generated == 0 {
		l.s.firstTokenSpan(r)
		l.s.prom.ttft.Observe(now.Sub(r.arrival).Seconds())
	} else {
		l.s.prom.tpot.Observe(now.Sub(r.lastTok).Seconds())
	}
	r.lastTok = now
	ev := r.next(l.s.cfg.Replies)
	r.events <- ev
	return ev.finish != ""
}

func (l *loop) done(r *request, params any) {
	r.state = stDone
	l.s.st.done.Add(1)
	// The gauges first: a client that holds the answer (a prefill's
	// kv_transfer_params) sees the hold counted, in Stats and in what a
	// Shutdown waits for. Updated only at the iteration's end, a Shutdown
	// right after the answer waited for one hold of two.
	l.gauges()
	r.events <- event{end: true, params: params}
}

func (l *loop) fail(r *request, e *apiError) {
	r.state = stDone
	l.s.st.failed.Add(1)
	l.s.log.Warn("request failed", zap.String("request_id", r.engID), zap.String("kind", r.kind.String()),
		zap.Int("status", e.code), zap.String("error", e.msg))
	r.events <- event{end: true, err: e}
}

func (l *loop) gone(r *request) {
	r.state = stDone
	l.s.st.aborted.Add(1)
	l.s.log.Info("request aborted: client gone", zap.String("request_id", r.engID), zap.String("kind", r.kind.String()))
}

func remove(q []*request, r *request) []*request {
	for i, x := range q {
		if x == r {
			copy(q[i:], q[i+1:])
			q[len(q)-1] = nil
			return q[:len(q)-1]
		}
	}
	return q
}

func (l *loop) takeCancels() {
	for {
		select {
		case r := <-l.s.cancelCh:
			l.cancelled(r)
		default:
			return
		}
	}
}

// cancelled handles a request whose client went away.
func (l *loop) cancelled(r *request) {
	switch r.state {
	case stWaiting:
		l.waiting = remove(l.waiting, r)
		l.dropKeepAlive(r)
		l.gone(r)
	case stPrefill:
		l.prefillQ = remove(l.prefillQ, r)
		if l.abortProgress(r) {
			l.gone(r)
			return
		}
		l.release(r)
		l.gone(r)
	case stLoading:
		if !l.cancelHistory(r, nil) {
			l.abortLoad(r, nil)
		}
	case stRunning:
		l.running = remove(l.running, r)
		l.release(r)
		l.gone(r)
	case stDone:
		// A prefill answered to nobody: its blocks will not be read.
		if r.kind == kindPrefill && l.held[r.engID] != nil {
			for i, p := range l.s.prods {
				if !l.held[r.engID].freed[i] {
					p.Abort(r.engID)
				}
			}
		}
	}
}

func (l *loop) dropKeepAlive(r *request) {
	if r.keptAlive {
		for _, c := range l.s.conss {
			c.Abort(r.engID)
		}
	}
}

func (l *loop) expire() {
	now := l.s.cfg.Clock.Now()
	for len(l.waiting) > 0 {
		i := -1
		for j, r := range l.waiting {
			if now.After(r.deadline) {
				i = j
				break
			}
		}
		if i < 0 {
			break
		}
		r := l.waiting[i]
		l.waiting = remove(l.waiting, r)
		l.dropKeepAlive(r)
		l.fail(r, &apiError{http.StatusServiceUnavailable, "server_error",
			fmt.Sprintf("no KV blocks within the request timeout (%v)", l.s.cfg.RequestTimeout), ""})
	}
	for _, r := range l.loading {
		if !r.aborting && now.After(r.deadline) {
			l.abortLoad(r, &apiError{http.StatusInternalServerError, "server_error",
				fmt.Sprintf("KV transfer did not finish within the request timeout (%v)", l.s.cfg.RequestTimeout), ""})
		}
	}
}

// stop ends every request left (their handlers are gone) and aborts the
// loads: the ranks' Close delivers their last results.
func (l *loop) stop() {
	l.takeCancels()
	closing := &apiError{http.StatusServiceUnavailable, "server_error", "engine closing", ""}
	for _, r := range l.waiting {
		l.dropKeepAlive(r)
		l.fail(r, closing)
	}
	l.waiting = nil
	for _, q := range [][]*request{l.prefillQ, l.running} {
		for _, r := range q {
			l.release(r)
			l.fail(r, closing)
		}
	}
	l.prefillQ, l.running = nil, nil
	for _, r := range l.loading {
		l.abortLoad(r, closing)
	}
	l.stopHistory(closing)
	l.pollConnectors()
	l.gauges()
}

// drainConnectors takes the closed ranks' last results (after stop).
func (l *loop) drainConnectors() {
	l.pollConnectors()
	l.gauges()
}

// releaseAll frees whatever a closed connector did not report.
func (l *loop) releaseAll() {
	for id, r := range l.loading {
		l.s.log.Warn("load without a result after close: blocks freed", zap.String("request_id", id))
		l.release(r)
		delete(l.loading, id)
	}
	for id, r := range l.histLoading {
		l.s.log.Warn("history load without a result after close: blocks freed", zap.String("request_id", id))
		l.release(r)
		delete(l.histLoading, id)
	}
	for id, h := range l.held {
		l.s.log.Warn("held blocks not freed by the connector after close: freed", zap.String("request_id", id))
		l.freeBlocks(h.blocks)
		delete(l.held, id)
	}
	l.gauges()
}
