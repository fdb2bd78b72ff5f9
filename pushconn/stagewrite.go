package pushconn

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/tracing"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// stagedWrite is the plan of a staged WRITE: the slot it gathers into,
// the whole image local -> remote (one descriptor each), and its chunks
// with each chunk's gather.
type stagedWrite struct {
	slot          *staging.Slot
	local, remote nixl.XferList
	bytes         uint64
	chunks        []staging.Chunk
	// blocks is the gather by block ids (whole blocks on both sides),
	// chunk k being its regions [R0, R1); else segs[k] is chunk k's.
	blocks *staging.BlockCopy
	segs   [][]staging.Seg
	// run, when set, is what the WRITE moves instead of the whole image:
	// image blocks [run.j0, run.j1) of every region (stageprogress.go),
	// gathered into the slot at their image offsets or, with no slot,
	// written from the blocks. part: a progressive WRITE, one chunk of
	// every region with no completion.
	run  *imageRun
	part bool
}

// gather copies chunk k of the image into the slot, running progress
// while it copies (see staging.ProgressCopier).
func (sw *stagedWrite) gather(p *Producer, k int, progress func()) error {
	if sw.run != nil {
		if sw.slot == nil {
			return nil // written from the blocks
		}
		return p.stage.CopyBlocksProgress(p.cfg.Staging.Copier, sw.run.gather(sw.slot.Addr, sw.chunks[k].R0, sw.chunks[k].R1), progress)
	}
	if sw.blocks != nil {
		return p.stage.CopyBlocksProgress(p.cfg.Staging.Copier, sw.blocks.Regions(sw.chunks[k].R0, sw.chunks[k].R1), progress)
	}
	return p.stage.CopyProgress(p.cfg.Staging.Copier, sw.segs[k], progress)
}

// stage decides whether the WRITE of h for registration pr goes through
// staging slots and, if so, takes a slot of this rank and plans it. It
// returns nil when the WRITE goes into the blocks directly (decode offered
// no slot or a slot that does not fit, the model prefers direct, no slot
// is free here, or the plan failed). Nothing is copied yet.
//
// descs and bytes are the direct transfer's size, for the cost model. t is
// the mapped direct transfer; nil when the layouts have SameBlocks, which
// then stage by block ids without it.
func (w *writer) stage(pr *pendingReg, h *hold, t *descriptors.Transfer, descs int, bytes uint64, dst *descriptors.Layout, dstBlocks []int, cached int) *stagedWrite {
	p := w.p
	if p.pool == nil || pr.reg.Staging == nil {
		return nil
	}
	im, err := staging.NewDstImage(&p.cfg.Layout, dst, len(dstBlocks))
	if err != nil {
		return nil // not stageable (an NHD destination across TP sizes): write into the blocks
	}
	n := staging.ChunkCount(im.Regions, p.cfg.Staging.Chunks)
	sw := w.stageSlot(pr, h, dst, im.Size(), descs, bytes, staging.ImageChunks(im.Regions, n, uint64(im.Blocks)*im.PerBlock, im.Size()))
	if sw == nil {
		return nil
	}
	if t == nil {
		// Whole blocks on both sides: the copier gathers by block ids.
		bc, err := staging.DstImageGather(&p.cfg.Layout, h.blocks, cached, len(dstBlocks), sw.slot.Addr)
		if err != nil {
			w.freeSlot(sw.slot)
			return nil
		}
		sw.blocks = &bc
		return sw
	}
	planStart := time.Now()
	plan, err := w.planner.PlanWrite(t, &p.cfg.Layout, dst, dstBlocks, im, *sw.slot, sw.remote.Descs[0].Addr)
	return w.planned(h, sw, plan, err, planStart)
}

// stageGroups is stage for a grouped request: t is its mapped direct
// WRITE (descriptors.MapGroupsInto, every group), whose pairs the gather
// follows into decode's group image (staging.GroupDstImage) of the
// registration's lists.
func (w *writer) stageGroups(pr *pendingReg, h *hold, t *descriptors.Transfer, dst *descriptors.Layout) *stagedWrite {
	p := w.p
	if p.pool == nil || pr.reg.Staging == nil {
		return nil
	}
	im, err := staging.NewGroupDstImage(&p.cfg.Layout, dst, pr.reg.LocalBlockIDs)
	if err != nil || im.Size() == 0 {
		// Not stageable (a region two groups share), or nothing of this
		// rank's in decode's lists: write into the blocks.
		return nil
	}
	sw := w.stageSlot(pr, h, dst, im.Size(), t.Len(), t.Bytes, im.Chunks(staging.ChunkCount(im.Regions(), p.cfg.Staging.Chunks)))
	if sw == nil {
		return nil
	}
	planStart := time.Now()
	plan, err := w.planner.PlanWriteGroups(t, &p.cfg.Layout, dst, im, *sw.slot, sw.remote.Descs[0].Addr)
	return w.planned(h, sw, plan, err, planStart)
}

// stageSlot checks decode's offer against this rank's image of size bytes
// (cut into chunks), asks the cost model and takes a slot of this rank:
// the staged WRITE without its gather, or nil to write into the blocks.
func (w *writer) stageSlot(pr *pendingReg, h *hold, dst *descriptors.Layout, size uint64, descs int, bytes uint64, chunks []staging.Chunk) *stagedWrite {
	p := w.p
	remote, ok := w.offered(pr, size)
	if !ok {
		return nil
	}
	if p.model.Choose(descs, bytes, 1) != staging.Staged {
		return nil
	}
	slot, ok := p.pool.Acquire(h.id)
	if !ok {
		p.stage.NoSlot.Inc()
		return nil
	}
	return &stagedWrite{
		slot:   &slot,
		local:  nixl.XferList{Mem: p.cfg.Layout.Mem, Descs: []nixl.Desc{{Addr: slot.Addr, Len: size, DevID: p.cfg.Layout.Regions[0].DevID}}},
		remote: nixl.XferList{Mem: dst.Mem, Descs: []nixl.Desc{{Addr: remote, Len: size, DevID: dst.Regions[0].DevID}}},
		bytes:  size,
		chunks: chunks,
	}
}

// offered returns where in decode's offered slot this rank's image of
// size bytes goes, or false when decode offered none that fits (its image
// of this rank is not ours, or lies outside its advertised slot): then the
// WRITE goes into the blocks, which is always right.
func (w *writer) offered(pr *pendingReg, size uint64) (uint64, bool) {
	p := w.p
	offer := pr.reg.Staging
	if p.pool == nil || offer == nil {
		return 0, false
	}
	info := pr.peer.payload.Ranks[pr.rank].Staging
	me := p.cfg.Layout.TPRank
	if info == nil || me >= len(offer.Offsets) || me >= len(offer.Sizes) {
		return 0, false
	}
	off := offer.Offsets[me]
	if size != offer.Sizes[me] || off > info.SlotBytes || size > info.SlotBytes-off || off%16 != 0 {
		p.log.Debug("pushconn: decode's staging offer does not fit this rank; writing directly",
			zap.String("decode_request", pr.reg.RequestID), zap.Uint64("offered_bytes", offer.Sizes[me]), zap.Uint64("image_bytes", size))
		return 0, false
	}
	remote, err := info.Slot(offer.Slot)
	if err != nil {
		return 0, false
	}
	return remote + off, true
}

// planned finishes a staged WRITE from its planned gather: cut at the
// chunks' bounds, or, when the plan failed, the slot freed and nil (the
// WRITE goes into the blocks).
func (w *writer) planned(h *hold, sw *stagedWrite, plan staging.WritePlan, err error, planStart time.Time) *stagedWrite {
	p := w.p
	if err == nil {
		sw.segs, err = staging.SplitGather(plan.Gather, sw.slot.Addr, sw.chunks)
	}
	p.stage.Planned(planStart)
	if err != nil {
		w.freeSlot(sw.slot)
		p.log.Warn("pushconn: staged plan failed; writing directly", zap.String("request", h.id), zap.Error(err))
		return nil
	}
	return sw
}

// postStaged gathers and posts a staged WRITE chunk by chunk: chunk k+1 is
// gathered while chunk k moves, and each chunk's WRITE carries its own
// completion so that decode scatters it while the next still moves.
// postMu is held; start is when the request's WRITE began.
func (w *writer) postStaged(pr *pendingReg, h *hold, sw *stagedWrite, start time.Time) postResult {
	p := w.p
	wr := &write{reg: pr, hold: h, deadline: p.mono().Add(p.cfg.WriteTimeout), bytes: sw.bytes, slot: sw.slot}
	n := len(sw.chunks)
	// While a chunk is gathered, the chunks before it are polled: that
	// progresses the agent, so they complete and their completions reach
	// decode (which scatters them) during the gather, not after the last.
	var inFlight error
	progress := func() {
		if inFlight == nil && len(wr.handles) > 0 {
			inFlight = w.pollHandles(wr)
		}
	}
	for k, ch := range sw.chunks {
		if err := sw.gather(p, k, progress); err != nil {
			return w.abandon(wr, pushwire.FailTransfer, fmt.Errorf("gather chunk %d of %d into the staging slot: %w", k, n, err))
		}
		if inFlight != nil {
			// An earlier chunk failed in flight (counted by pollHandles).
			return w.abandon(wr, pushwire.FailTransfer, inFlight)
		}
		var opts *nixl.Options
		if !sw.part || pr.reg.Staging.Parts {
			// A progressive part notifies only a decode that scatters
			// parts (stagedparts.go); its notification is no completion.
			var msg []byte
			var err error
			switch {
			case sw.part:
				msg, err = pushwire.EncodeStagedPart(pr.reg.RequestID, p.world, sw.run.j0, sw.run.j1, pr.reg.Seq)
			case n == 1:
				msg, err = pushwire.EncodeStaged(pr.reg.RequestID, p.world, pr.reg.Seq)
			default:
				msg, err = pushwire.EncodeStagedChunk(pr.reg.RequestID, p.world, k, n, pr.reg.Seq)
			}
			if err != nil {
				return w.abandon(wr, pushwire.FailLayout, err)
			}
			opts = nixl.NotifOptions(msg)
		}
		var local, remote nixl.XferList
		if sw.run != nil {
			local, remote = sw.run.lists(sw.slot, ch.R0, ch.R1)
		} else {
			local, remote = staging.ChunkLists(sw.local, sw.remote, ch)
		}
		local, remote = staging.SplitLists(local, remote, p.cfg.Staging.TransferChunk)
		xh, err := p.cfg.Agent.CreateXferReq(nixl.Write, local, remote, pr.sender, opts)
		var status nixl.Status
		if err == nil {
			status, err = p.cfg.Agent.PostXferReq(xh, nil)
			if err != nil {
				_ = p.cfg.Agent.ReleaseXferReq(xh)
			}
		}
		if err != nil {
			if k == 0 && peerGone(err) && !pr.retry {
				// Nothing of it moved: handshake again, as a direct WRITE does.
				w.freeSlot(sw.slot)
				return postResult{what: postRetry, err: err}
			}
			p.stats.FailedTransfers.Inc()
			return w.abandon(wr, pushwire.FailPost, fmt.Errorf("post WRITE of chunk %d of %d: %w", k, n, err))
		}
		if k == 0 {
			// The transfer time starts once the first chunk is posted.
			wr.posted = time.Now()
		}
		wr.descs += len(local.Descs)
		if status == nixl.StatusSuccess {
			if err := p.cfg.Agent.ReleaseXferReq(xh); err != nil {
				p.log.Debug("pushconn: release of a completed WRITE failed", zap.Error(err))
			}
			continue
		}
		wr.handles = append(wr.handles, xh)
	}
	posted := time.Now()
	p.stats.RecordPost(posted.Sub(start))
	// The post span covers gathering and posting every chunk (the
	// gathers and posts interleave).
	p.spans.Record(h.id, tracing.Post, start, posted, nil, attribute.Int("gonixl.staged_chunks", n))
	if len(wr.handles) == 0 {
		return postResult{what: postCompleted, wr: wr}
	}
	return postResult{what: postInFlight, wr: wr}
}

// abandon ends a staged WRITE that could not be posted whole: once the
// agent let go of the chunks already posted, its slot is freed and decode
// told; until then it stays in flight, cancelling, as a failed WRITE does.
// The core drops the decode engine's handshake when err says its agents
// are gone.
func (w *writer) abandon(wr *write, kind pushwire.FailKind, err error) postResult {
	if len(wr.handles) == 0 || w.release(wr) {
		w.freeSlot(wr.slot)
		return postResult{what: postFailed, kind: kind, err: err}
	}
	wr.cancelling, wr.failErr, wr.drainUntil = true, err, w.p.mono().Add(w.p.cfg.WriteTimeout)
	return postResult{what: postCancelling, wr: wr, err: err}
}

// freeSlot releases a prefill staging slot (nil: none).
func (w *writer) freeSlot(s *staging.Slot) {
	if s == nil {
		return
	}
	if err := w.p.pool.Release(*s); err != nil {
		w.p.log.Error("pushconn: staging slot released twice", zap.Error(err))
	}
}
