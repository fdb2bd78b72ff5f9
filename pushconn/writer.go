package pushconn

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/tracing"
	"github.com/gonixl/gonixl/internal/xfertime"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// writer is the shell around a prefill rank's writer core (writeCore): it
// runs on the Producer's poller goroutine, feeds the core the poller's
// notifications and the Producer's queues with a reading of the rank's
// clocks, and carries out what the core asks of its edge on the rank's
// agent, handshake client and staging slots. Only the poller goroutine
// touches it (and Close, once the poller stopped).
type writer struct {
	p       *Producer
	core    *writeCore
	scratch descriptors.Transfer // mapping lists, reused by post
	runs    runMapper            // per-layer WRITEs' lists, into scratch
	planner staging.Planner
}

// newWriter makes p's writer and its core.
func newWriter(p *Producer) error {
	cfg := writeConfig{
		engineID: p.engine.ID(), tpSize: p.engine.TPSize(), ppSize: p.engine.PPSize(), world: p.world,
		layout: &p.cfg.Layout, vllm: p.engine.vllm(),
		registrationTimeout: p.cfg.RegistrationTimeout, writeTimeout: p.cfg.WriteTimeout, lease: p.cfg.Lease,
		engineTTL: p.cfg.EngineTTL, maxPeers: p.cfg.MaxPeers, maxPending: p.cfg.MaxPendingRegistrations,
	}
	p.w.p = p
	core, err := newWriteCore(cfg, &p.w, p.log, p.stats, p.push)
	p.w.core = core
	return err
}

// busy keeps the poller at its 1 ms period only while finished blocks wait
// for a registration or WRITEs are in flight.
func (w *writer) busy() bool { return w.core.busy() }

// tick runs after each round of notifications: handshakes that finished,
// requests that finished or were aborted, WRITEs in flight, and deadlines.
func (w *writer) tick() {
	p := w.p
	p.mu.Lock()
	finished, shakes, aborts, progress := p.finished, p.shakes, p.aborts, p.progressQ
	p.finished, p.shakes, p.aborts, p.progressQ = nil, nil, nil, nil
	p.mu.Unlock()
	// Progress first: a request reports it before it finishes.
	progressWriter{w.core}.progress(progress)
	w.core.tick(shakes, finished, aborts)
}

// onStray counts notifications a prefill rank never expects.
func (w *writer) onStray(sender string, msg []byte) {
	w.p.stats.UnknownNotifications.Inc()
	w.p.log.Debug("pushconn: dropped a notification prefill does not expect", zap.String("sender", sender), zap.Int("bytes", len(msg)))
}

// shutdown ends everything after the poller stopped (writeCore.shutdown).
func (w *writer) shutdown() { w.core.shutdown() }

// ---- the core's edge, on the rank's agent ----------------------------------

func (w *writer) notify(to string, msg []byte) error { return w.p.cfg.Agent.GenNotif(to, msg, nil) }

// handshake fetches a decode engine's payload in the background; the
// result reaches the core through the next tick.
func (w *writer) handshake(de *decodeEngine) {
	p := w.p
	key, engineID, addr, tp := de.key, de.engineID, de.addr, de.tp
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		pl, err := p.engine.core.Client().Get(p.ctx, engineID, addr, tp)
		p.mu.Lock()
		p.shakes = append(p.shakes, shakeResult{key: key, payload: pl, err: err})
		p.mu.Unlock()
		p.poll.Wake()
	}()
}

func (w *writer) forgetHandshake(de *decodeEngine) {
	w.p.engine.core.Client().Forget(de.engineID, de.addr)
}

func (w *writer) loadMD(agent string, md []byte) (string, error) {
	return loadPeerMD(w.p.cfg.Agent, agent, md)
}

func (w *writer) unloadMD(agent string) error { return w.p.cfg.Agent.InvalidateRemoteMD(agent) }

func (w *writer) aborted(id string) bool { return w.p.isAborted(id) }

func (w *writer) free(id string) { w.p.free(id) }

// now reads the rank's clocks for the core.
func (w *writer) now() instant { return instant{wall: w.p.now(), mono: w.p.mono()} }

// post maps the request's blocks onto decode's and posts the WRITE with
// completion msg (writeEdge.post).
func (w *writer) post(pr *pendingReg, h *hold, msg []byte) postResult {
	p := w.p
	dstBlocks := pr.reg.LocalBlockIDs[0]
	if h.groups == nil && len(dstBlocks) == 0 { // decode holds everything
		return postResult{what: postNotify}
	}
	dst := &pr.peer.payload.Ranks[pr.rank].Layout
	start := time.Now()
	if h.groups != nil {
		// A grouped request: mapped group by group, and staged through
		// decode's group image when it offered a slot (stageGroups).
		if err := w.mapGroups(&w.scratch, pr, h, dst); err != nil {
			return postResult{what: postFailed, kind: pushwire.FailLayout, err: fmt.Errorf("map prefill blocks onto decode rank %d: %w", pr.rank, err)}
		}
		if w.scratch.Len() == 0 { // decode holds everything this rank has
			return postResult{what: postNotify}
		}
		return w.postMapped(pr, h, msg, &w.scratch, w.stageGroups(pr, h, &w.scratch, dst), start)
	}
	cached, err := dstCached(len(h.blocks), len(dstBlocks), p.cfg.Layout.BlockSize, dst.BlockSize, h.tokens)
	if err == nil && pr.progress == h && pr.wroteAny(cached) {
		if pr.partInto == partStaged {
			return w.postStagedRest(pr, h, dst, dstBlocks, cached, start)
		}
		return w.postRest(pr, h, msg, dst, dstBlocks, cached, start)
	}
	// The lists are reused from WRITE to WRITE (only the poller goroutine
	// runs the writer): agents copy them in CreateXferReq, and a fragmented
	// request would otherwise allocate megabytes each time.
	t := &w.scratch
	var sw *stagedWrite
	if err == nil {
		// Whole blocks one to one: staging needs no mapping and the model
		// only the runs (mapping a fragmented request is the largest CPU
		// cost before its first byte moves). Otherwise the mapped WRITE
		// is the direct one and the staged plan's input.
		same := p.pool != nil && pr.reg.Staging != nil && staging.SameBlocks(&p.cfg.Layout, dst) && len(h.blocks)-cached == len(dstBlocks)
		if same {
			bytes := uint64(len(dstBlocks)) * uint64(len(dst.Regions)) * dst.BlockLen()
			sw = w.stage(pr, h, nil, staging.SameBlocksDescs(dst, h.blocks[cached:], dstBlocks), bytes, dst, dstBlocks, cached)
		}
		if sw == nil {
			_, err = descriptors.MapCoalescedInto(t, &p.cfg.Layout, dst, descriptors.Request{SrcBlocks: h.blocks, DstBlocks: dstBlocks, DstCached: cached})
		}
		if err == nil && sw == nil && !same {
			sw = w.stage(pr, h, t, t.Len(), t.Bytes, dst, dstBlocks, cached)
		}
	}
	if err != nil {
		return postResult{what: postFailed, kind: pushwire.FailLayout, err: fmt.Errorf("map prefill blocks onto decode rank %d: %w", pr.rank, err)}
	}
	return w.postMapped(pr, h, msg, t, sw, start)
}

// postMapped posts a mapped WRITE t (or the staged one sw) with completion
// msg, unless the engine aborted the request meanwhile.
func (w *writer) postMapped(pr *pendingReg, h *hold, msg []byte, t *descriptors.Transfer, sw *stagedWrite, start time.Time) postResult {
	p := w.p
	// Abort waits for postMu: once it returned, no WRITE of the request
	// starts.
	p.postMu.Lock()
	defer p.postMu.Unlock()
	if p.isAborted(h.id) {
		if sw != nil {
			w.freeSlot(sw.slot)
		}
		return postResult{what: postFailed, kind: pushwire.FailAborted, err: errEngineAborted}
	}
	if sw != nil {
		return w.postStaged(pr, h, sw, start)
	}
	local, remote := t.Sides(nixl.Write)
	bytes, descs := t.Bytes, t.Len()
	var opts *nixl.Options // a progressive WRITE notifies nobody
	if msg != nil {
		opts = nixl.NotifOptions(msg)
	}
	xh, err := p.cfg.Agent.CreateXferReq(nixl.Write, local, remote, pr.sender, opts)
	if err != nil && peerGone(err) && !pr.retry {
		return postResult{what: postRetry, err: err}
	}
	if err != nil {
		p.stats.FailedTransfers.Inc()
		return postResult{what: postFailed, kind: pushwire.FailPost, err: fmt.Errorf("create WRITE: %w", err)}
	}
	status, err := p.cfg.Agent.PostXferReq(xh, nil)
	posted := time.Now()
	ownPost := !p.times.PostsByNIXL()
	if ownPost {
		p.stats.RecordPost(posted.Sub(start))
	}
	p.spans.Record(h.id, tracing.Post, start, posted, err)
	// The transfer time starts once the WRITE is posted, as pull's READ
	// time does: the same metric means the same thing on both connectors.
	wr := &write{reg: pr, hold: h, handles: []nixl.XferHandle{xh}, posted: posted, deadline: p.mono().Add(p.cfg.WriteTimeout), bytes: bytes, descs: descs, postTimed: ownPost}
	switch {
	case err != nil && peerGone(err) && !pr.retry:
		_ = p.cfg.Agent.ReleaseXferReq(xh)
		return postResult{what: postRetry, err: err}
	case err != nil:
		_ = p.cfg.Agent.ReleaseXferReq(xh)
		p.stats.FailedTransfers.Inc()
		return postResult{what: postFailed, kind: pushwire.FailPost, err: fmt.Errorf("post WRITE: %w", err)}
	case status == nixl.StatusSuccess:
		return postResult{what: postCompleted, wr: wr}
	default:
		return postResult{what: postInFlight, wr: wr}
	}
}

// postRest posts the final WRITE of a request of which pr had some
// blocks written in progressive WRITEs (writeprogress.go, in some layers
// only: writelayers.go): exactly what it has not had, with the
// completion. When it had everything it moves the last block again, so
// the completion rides a WRITE posted after every other one ended, as
// without progress.
func (w *writer) postRest(pr *pendingReg, h *hold, msg []byte, dst *descriptors.Layout, dstBlocks []int, cached int, start time.Time) postResult {
	runs := restRuns(pr.mark(), len(h.blocks), w.p.cfg.Layout.NumLayers, cached, len(dstBlocks))
	if err := w.runs.mapRuns(&w.scratch, &w.p.cfg.Layout, dst, h.blocks, dstBlocks, cached, runs); err != nil {
		return postResult{what: postFailed, kind: pushwire.FailLayout, err: fmt.Errorf("map prefill blocks onto decode rank %d: %w", pr.rank, err)}
	}
	return w.postMapped(pr, h, msg, &w.scratch, nil, start)
}

// postPart posts the progressive WRITE of what of h is final and pr has
// not had (writeEdge.postPart): only between blocks of one size (block i
// of the request is block i of decode's after its prefix hit); staged into
// decode's slot where it offered one that fits (stageprogress.go), else
// direct. A registration whose parts are staged, or may be, takes blocks
// final in every layer only (a staged part is whole image blocks); one
// whose parts go direct takes a per-layer report's new layers too.
func (w *writer) postPart(pr *pendingReg, h *hold) postResult {
	p := w.p
	dst := &pr.peer.payload.Ranks[pr.rank].Layout
	if h.groups != nil || dst.BlockSize != p.cfg.Layout.BlockSize {
		return postResult{what: postFailed, err: fmt.Errorf("decode rank %d's blocks hold %d tokens, prefill's %d: written whole at finish", pr.rank, dst.BlockSize, p.cfg.Layout.BlockSize)}
	}
	dstBlocks := pr.reg.LocalBlockIDs[0]
	total := (h.tokens + dst.BlockSize - 1) / dst.BlockSize
	cached := total - len(dstBlocks)
	if cached < 0 {
		return postResult{what: postFailed, err: fmt.Errorf("decode registered %d blocks, the request needs %d", len(dstBlocks), total)}
	}
	whole := pr.partInto == partStaged // staged parts, or parts that may be, take whole blocks only
	if !whole && h.layers > 0 && pr.partInto == partUndecided {
		_, whole = w.stageImage(pr, dst, len(dstBlocks))
	}
	runs, want := partRuns(pr.mark(), h, whole, p.cfg.Layout.NumLayers, cached, total)
	if len(runs) == 0 {
		return postResult{what: postNotify}
	}
	start, into, sw, use := time.Now(), partDirect, (*stagedWrite)(nil), false
	if len(runs) == 1 && runs[0].lo == 0 && runs[0].hi == p.cfg.Layout.NumLayers { // whole blocks: a staged part where it can be
		sw, use = w.stagePart(pr, h, dst, dstBlocks, cached, runs[0].from, runs[0].to)
	}
	switch {
	case use && sw == nil: // no prefill slot free: put off
		return postResult{what: postNotify}
	case use:
		into = partStaged
	default:
		if err := w.runs.mapRuns(&w.scratch, &p.cfg.Layout, dst, h.blocks, dstBlocks, cached, runs); err != nil {
			return postResult{what: postFailed, err: err}
		}
	}
	r := w.postMapped(pr, h, nil, &w.scratch, sw, start)
	if r.wr != nil {
		r.wr.partial, r.wr.to, r.wr.tailTo, r.wr.tailLayers = true, want.full, want.tail, want.layers
		pr.partInto = into
		if into == partStaged {
			p.push.progressStaged.Inc()
		}
	}
	return r
}

// dstCached returns how many of the request's blocks decode already held
// (a prefix-cache hit), which are left out of its registration.
func dstCached(srcBlocks, dstBlocks, srcTokens, dstTokens, tokens int) (int, error) {
	var total int
	switch {
	case tokens > 0:
		total = (tokens + dstTokens - 1) / dstTokens
	case dstTokens >= srcTokens:
		// Exact: the request's last token lies in prefill's last block.
		total = (srcBlocks*srcTokens + dstTokens - 1) / dstTokens
	default:
		// Ambiguous without the token count: assume no prefix hit.
		total = dstBlocks
	}
	if dstBlocks > total {
		return 0, fmt.Errorf("%w: decode registered %d blocks of %d tokens, the request needs at most %d",
			descriptors.ErrInvalid, dstBlocks, dstTokens, total)
	}
	return total - dstBlocks, nil
}

// poll checks a WRITE's transfer requests once (writeEdge.poll).
func (w *writer) poll(wr *write) (bool, error) {
	err := w.pollHandles(wr)
	return err == nil && len(wr.handles) == 0, err
}

// pollHandles checks a WRITE's transfer requests once, releasing the ones
// that completed; it returns the error of one that failed.
func (w *writer) pollHandles(wr *write) error {
	p := w.p
	left := wr.handles[:0]
	var failed error
	for _, xh := range wr.handles {
		if failed != nil {
			left = append(left, xh)
			continue
		}
		status, err := p.cfg.Agent.XferStatus(xh)
		switch {
		case err != nil:
			p.stats.FailedTransfers.Inc()
			failed = fmt.Errorf("WRITE failed in flight: %w", err)
			left = append(left, xh)
		case status == nixl.StatusSuccess:
			if wr.slot == nil && len(wr.handles) == 1 {
				// NIXL's telemetry of the request is gone once released.
				wr.times = p.times.Finished(xh, time.Since(wr.posted))
			}
			if err := p.cfg.Agent.ReleaseXferReq(xh); err != nil {
				p.log.Debug("pushconn: release of a completed WRITE failed", zap.Error(err))
			}
		default:
			left = append(left, xh)
		}
	}
	clear(wr.handles[len(left):])
	wr.handles = left
	return failed
}

// release asks the agent to let go of a WRITE's transfer requests and
// reports whether it did for all: then no byte of it moves any more. A
// handle the agent no longer knows counts as released.
func (w *writer) release(wr *write) bool {
	errs := make([]error, len(wr.handles))
	if err := nixl.ReleaseXferReqs(w.p.cfg.Agent, wr.handles, errs); err != nil {
		return false
	}
	left := wr.handles[:0]
	for i, xh := range wr.handles {
		err := errs[i]
		if !(err == nil || errors.Is(err, nixl.ErrInvalidParam) || errors.Is(err, nixl.ErrNotFound)) {
			left = append(left, xh)
		}
	}
	clear(wr.handles[len(left):])
	wr.handles = left
	return len(left) == 0
}

// completed releases a completed WRITE's transfer requests and its
// staging slot and records its time.
func (w *writer) completed(wr *write) {
	p := w.p
	w.timed(wr)
	errs := make([]error, len(wr.handles))
	if err := nixl.ReleaseXferReqs(p.cfg.Agent, wr.handles, errs); err != nil {
		p.log.Debug("pushconn: release of a completed WRITE failed", zap.Error(err))
	}
	for _, err := range errs {
		if err != nil {
			p.log.Debug("pushconn: release of a completed WRITE failed", zap.Error(err))
		}
	}
	wr.handles = nil
	if p.stage != nil {
		if wr.slot != nil {
			p.stage.Staged.Inc()
		} else {
			p.stage.Direct.Inc()
		}
	}
	w.freeSlot(wr.slot)
}

// timed records a completed WRITE's times, before its transfer requests
// are released: NIXL's telemetry for a direct WRITE where the agent has
// it, the rank's clock otherwise (a staged WRITE is several requests), and
// its span under the request's hold span.
func (w *writer) timed(wr *write) {
	p := w.p
	own := time.Since(wr.posted)
	t := wr.times // read as the request completed (pollHandles)
	switch {
	case t.By != "":
	case wr.slot == nil && len(wr.handles) == 1: // completed at its post
		t = p.times.Finished(wr.handles[0], own)
	default:
		t = p.times.Own(own)
	}
	p.stats.RecordTransfer(wr.bytes, wr.descs, t.Xfer)
	if t.By == xfertime.ByNIXL && !wr.postTimed {
		p.stats.RecordPost(t.Post)
	}
	if id := wr.hold.id; p.spans.Traced(id) {
		start, end := t.Span()
		p.spans.Record(id, tracing.Transfer, start, end, nil, tracing.TransferAttrs(0, wr.bytes, wr.descs, t.By, t.Post)...)
	}
}

// ended frees the staging slot of a WRITE that failed.
func (w *writer) ended(wr *write) { w.freeSlot(wr.slot) }

// cancel drops a WRITE in flight at shutdown.
func (w *writer) cancel(wr *write) {
	for _, xh := range wr.handles {
		_ = w.p.cfg.Agent.ReleaseXferReq(xh)
	}
	w.freeSlot(wr.slot)
}
