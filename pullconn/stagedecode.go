package pullconn

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
)

// stagedRead decides whether the READ of load l from prefill rank s (its
// mapped pairs tr) reads prefill's staging slot instead of its blocks, and
// returns the plan when it does: prefill gathered the request into the
// slot its Params name, the model prefers it, and this rank has room in a
// slot of its own. wmu is held.
func (c *Consumer) stagedRead(l *load, s int, tr *descriptors.Transfer, cached int) (bool, staging.ReadPlan, *staging.BlockCopy) {
	if c.pool == nil || l.p.RemoteStagingSlot == nil {
		return false, staging.ReadPlan{}, nil
	}
	pr := &l.r.setup.payload.Ranks[s]
	if pr.Staging == nil {
		return false, staging.ReadPlan{}, nil
	}
	remote, err := pr.Staging.Slot(*l.p.RemoteStagingSlot)
	if err != nil || staging.SrcImageSize(&pr.Layout, len(l.p.RemoteBlockIDs)) > pr.Staging.SlotBytes {
		// Not a slot that prefill's image fits: it cannot have gathered there.
		return false, staging.ReadPlan{}, nil
	}
	if c.model.Choose(tr.Len(), tr.Bytes, staging.MaxRuns) != staging.Staged {
		return false, staging.ReadPlan{}, nil
	}
	if l.slot == nil {
		slot, ok := c.pool.Acquire(l.id)
		if !ok {
			c.stage.NoSlot.Inc()
			return false, staging.ReadPlan{}, nil
		}
		l.slot, l.slotUsed = &slot, 0
	}
	part := staging.Slot{Index: l.slot.Index, Addr: l.slot.Addr + l.slotUsed, Len: l.slot.Len - l.slotUsed}
	if staging.SameBlocks(&pr.Layout, &c.cfg.Layout) {
		// Whole blocks on both sides: one span, scattered by block ids.
		plan, sc, err := staging.SameBlocksRead(&pr.Layout, &c.cfg.Layout, len(l.p.RemoteBlockIDs), cached, l.local, remote, part)
		if err == nil {
			l.slotUsed += (plan.Bytes + 15) &^ 15
			return true, plan, &sc
		}
	}
	planStart := time.Now()
	plan, err := c.planner.PlanRead(tr, &pr.Layout, &c.cfg.Layout, l.p.RemoteBlockIDs, remote, part)
	c.stage.Planned(planStart)
	if err != nil {
		c.log.Debug("pullconn: staged READ not possible; reading the blocks", zap.String("request_id", l.id), zap.Error(err))
		return false, staging.ReadPlan{}, nil
	}
	l.slotUsed += (plan.Bytes + 15) &^ 15
	return true, plan, nil
}

// scatter copies the load's staged READs from its slot into its blocks;
// the READs are done. wmu is held.
func (c *Consumer) scatter(l *load) error {
	for _, x := range l.xfers {
		if c.stage == nil {
			return nil
		}
		var err error
		switch {
		case x.scatterBlocks != nil:
			err = c.stage.CopyBlocks(c.cfg.Staging.Copier, *x.scatterBlocks)
		case x.scatter != nil:
			err = c.stage.Copy(c.cfg.Staging.Copier, x.scatter)
		default:
			c.stage.Direct.Inc()
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: request %q: scatter of prefill rank %d's part: %v", ErrStaging, l.id, x.rank, err)
		}
		c.stage.Staged.Inc()
	}
	return nil
}
