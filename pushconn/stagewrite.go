package pushconn

import (
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/nixl"
)

// stage decides whether the WRITE of h for registration pr goes through
// staging slots and, if so, gathers it into a slot of this rank. It
// returns the slot and the plan of the one WRITE, nil when the WRITE goes
// into the blocks directly (decode offered no slot or a slot that does
// not fit, the model prefers direct, or no slot is free here). An error
// means the gather failed: the slot is already released.
func (w *writer) stage(pr *pendingReg, h *hold, t *descriptors.Transfer, dst *descriptors.Layout, dstBlocks []int, cached int) (*staging.Slot, staging.WritePlan, error) {
	p := w.p
	offer := pr.reg.Staging
	if p.pool == nil || offer == nil {
		return nil, staging.WritePlan{}, nil
	}
	info := pr.peer.payload.Ranks[pr.rank].Staging
	me := p.cfg.Layout.TPRank
	if info == nil || me >= len(offer.Offsets) {
		return nil, staging.WritePlan{}, nil
	}
	im, err := staging.NewDstImage(&p.cfg.Layout, dst, len(dstBlocks))
	size, off := im.Size(), offer.Offsets[me]
	if err != nil || size != offer.Sizes[me] || off > info.SlotBytes || size > info.SlotBytes-off || off%16 != 0 {
		// Decode's image of this rank is not ours (or lies outside its
		// advertised slot): write into the blocks, which is always right.
		p.log.Debug("pushconn: decode's staging offer does not fit this rank; writing directly",
			zap.String("decode_request", pr.reg.RequestID), zap.Uint64("offered_bytes", offer.Sizes[me]), zap.Uint64("image_bytes", size))
		return nil, staging.WritePlan{}, nil
	}
	remote, err := info.Slot(offer.Slot)
	if err != nil {
		return nil, staging.WritePlan{}, nil
	}
	if p.model.Choose(t.Len(), t.Bytes, 1) != staging.Staged {
		return nil, staging.WritePlan{}, nil
	}
	slot, ok := p.pool.Acquire(h.id)
	if !ok {
		p.stage.NoSlot.Inc()
		return nil, staging.WritePlan{}, nil
	}
	if staging.SameBlocks(&p.cfg.Layout, dst) {
		// Whole blocks on both sides: the copier gathers by block ids.
		bc, err := staging.DstImageGather(&p.cfg.Layout, h.blocks, cached, len(dstBlocks), slot.Addr)
		if err == nil {
			if err := p.stage.CopyBlocks(p.cfg.Staging.Copier, bc); err != nil {
				w.freeSlot(&slot)
				return nil, staging.WritePlan{}, err
			}
			return &slot, staging.WritePlan{
				Local:  nixl.XferList{Mem: p.cfg.Layout.Mem, Descs: []nixl.Desc{{Addr: slot.Addr, Len: size, DevID: p.cfg.Layout.Regions[0].DevID}}},
				Remote: nixl.XferList{Mem: dst.Mem, Descs: []nixl.Desc{{Addr: remote + off, Len: size, DevID: dst.Regions[0].DevID}}},
				Bytes:  size,
			}, nil
		}
	}
	planStart := time.Now()
	plan, err := w.planner.PlanWrite(t, &p.cfg.Layout, dst, dstBlocks, im, slot, remote+off)
	p.stage.Planned(planStart)
	if err != nil {
		w.freeSlot(&slot)
		p.log.Warn("pushconn: staged plan failed; writing directly", zap.String("request", h.id), zap.Error(err))
		return nil, staging.WritePlan{}, nil
	}
	if err := p.stage.Copy(p.cfg.Staging.Copier, plan.Gather); err != nil {
		w.freeSlot(&slot)
		return nil, staging.WritePlan{}, err
	}
	return &slot, plan, nil
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
