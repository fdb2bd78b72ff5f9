package pullconn

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/nixl"
)

// stager is a decode rank's staging (RankConfig.Staging): its slots,
// counters, cost model and the plans' scratch, and its readiness queries
// of slots prefill gathers in the background (ready.go). Without staging
// pool is nil: nothing is staged.
type stager struct {
	rd        *reader
	pool      *staging.Pool
	stage     *staging.Counters
	model     staging.Model
	planner   staging.Planner
	readiness readyCounters
}

// readBlocks is read's answer when a staged READ cannot be planned for l
// (why says what stopped it): l reads prefill's blocks directly, as an
// unstaged load does.
func (c *stager) readBlocks(l *load, why error) (bool, staging.ReadPlan, *staging.BlockCopy) {
	c.rd.log.Debug("pullconn: staged READ not possible; reading the blocks", zap.String("request_id", l.id), zap.Error(why))
	return false, staging.ReadPlan{}, nil
}

// release gives an ended load's slot back: no READ of the load can land
// in it any more.
func (c *stager) release(l *load) {
	if l.slot == nil {
		return
	}
	if err := c.pool.Release(*l.slot); err != nil {
		c.rd.log.Error("pullconn: staging slot released twice", zap.String("request_id", l.id), zap.Error(err))
	}
	l.slot = nil
}

// read decides whether the READ of load l from prefill rank s (its
// mapped pairs tr) reads prefill's staging slot instead of its blocks, and
// returns the plan when it does: prefill gathered the request into the
// slot its Params name, the model prefers it, and this rank has room in a
// slot of its own. descs and bytes are the direct READ's size, for the
// cost model; tr is the mapped direct READ, nil when the layouts have
// SameBlocks (then the READ is planned from the block ids alone). wmu is
// held.
func (c *stager) read(l *load, s int, tr *descriptors.Transfer, descs int, bytes uint64, cached int) (bool, staging.ReadPlan, *staging.BlockCopy) {
	if c.pool == nil || l.p.RemoteStagingSlot == nil {
		return false, staging.ReadPlan{}, nil
	}
	pr := &l.r.setup.payload.Ranks[s]
	if pr.Staging == nil {
		return false, staging.ReadPlan{}, nil
	}
	remote, err := pr.Staging.Slot(*l.p.RemoteStagingSlot)
	size := staging.SrcImageSize(&pr.Layout, len(l.p.RemoteBlockIDs))
	if l.groups != nil {
		size, err = staging.GroupImageSize(&pr.Layout, l.p.RemoteGroupBlockIDs)
	}
	if err != nil || size > pr.Staging.SlotBytes {
		// Not a slot that prefill's image fits: it cannot have gathered there.
		return false, staging.ReadPlan{}, nil
	}
	if c.model.Choose(descs, bytes, staging.MaxRuns) != staging.Staged {
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
	if tr == nil {
		// Whole blocks on both sides: one span, scattered by block ids.
		plan, sc, err := staging.SameBlocksRead(&pr.Layout, &c.rd.cfg.Layout, len(l.p.RemoteBlockIDs), cached, l.local, remote, part)
		if err != nil {
			return c.readBlocks(l, err)
		}
		l.slotUsed += (plan.Bytes + 15) &^ 15
		return true, plan, &sc
	}
	planStart := c.rd.steady()
	var plan staging.ReadPlan
	if l.groups != nil {
		plan, err = c.planner.PlanReadGroups(tr, &pr.Layout, &c.rd.cfg.Layout, l.p.RemoteGroupBlockIDs, remote, part)
	} else {
		plan, err = c.planner.PlanRead(tr, &pr.Layout, &c.rd.cfg.Layout, l.p.RemoteBlockIDs, remote, part)
	}
	c.stage.Planned(planStart)
	if err != nil {
		return c.readBlocks(l, err)
	}
	l.slotUsed += (plan.Bytes + 15) &^ 15
	return true, plan, nil
}

// scatter copies the load's staged READs from its slot into its blocks
// (those not scattered yet); the READs are done.
func (c *stager) scatter(l *load) error {
	for _, x := range l.xfers {
		if c.stage == nil {
			return nil
		}
		if err := c.scatterOne(l, x); err != nil {
			return err
		}
	}
	return nil
}

// scatterOne scatters one done READ of the load, once, and counts the
// rank's path (by its last chunk, for a chunked READ).
func (c *stager) scatterOne(l *load, x *xfer) error {
	if x.scattered {
		return nil
	}
	x.scattered = true
	var err error
	switch {
	case x.scatterBlocks != nil && x.part && !c.rd.cfg.Inline:
		// A pipelined chunk while later ones may still wait for prefill's
		// gather: their READs are posted during this scatter.
		err = c.stage.CopyBlocksProgress(c.rd.cfg.Staging.Copier, *x.scatterBlocks, c.readyProgress)
	case x.scatterBlocks != nil:
		err = c.stage.CopyBlocks(c.rd.cfg.Staging.Copier, *x.scatterBlocks)
	case x.scatter != nil:
		err = c.stage.Copy(c.rd.cfg.Staging.Copier, x.scatter)
	default:
		c.stage.Direct.Inc()
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: request %q: scatter of prefill rank %d's part: %v", errStaging, l.id, x.rank, err)
	}
	if !x.part {
		c.stage.Staged.Inc()
	}
	return nil
}

// postChunks posts the staged READ of prefill rank s (its plan, one span,
// scattered by sc) as Staging.Chunks READs of region ranges, none carrying the
// completion: each chunk is scattered as soon as it is read, while the
// later ones are still read. await (Params.RemoteStagingAwait) keeps each
// chunk back until prefill rank s has gathered its regions (ready.go).
func (c *stager) postChunks(l *load, s int, plan staging.ReadPlan, sc *staging.BlockCopy, await bool) error {
	set := l.r.setup
	regions := len(sc.Bases)
	chunks := staging.ImageChunks(regions, staging.ChunkCount(regions, c.rd.cfg.Staging.Chunks), sc.SlotStride, plan.Bytes)
	descs := 0 // the rank's, carried by its last chunk
	for _, ch := range chunks {
		descs += ch.Descs(c.rd.cfg.Staging.TransferChunk)
	}
	for k, ch := range chunks {
		local, remote := staging.ChunkLists(plan.Local, plan.Remote, ch)
		local, remote = staging.SplitLists(local, remote, c.rd.cfg.Staging.TransferChunk)
		part := sc.Regions(ch.R0, ch.R1)
		x := &xfer{rank: s, bytes: plan.Bytes, descs: descs, part: k < len(chunks)-1, scatterBlocks: &part}
		if await {
			l.pendingRead(x, local, remote, ch.R1)
			continue
		}
		h, err := c.rd.xfer.CreateXferReq(nixl.Read, local, remote, set.agents[s], nil)
		if err != nil {
			return err
		}
		x.h = h
		l.xfers = append(l.xfers, x)
		st, err := c.rd.xfer.PostXferReq(h, nil)
		x.start = c.rd.steady()
		if err != nil {
			return err
		}
		if st == nixl.StatusSuccess {
			x.done = true
			if !x.part {
				c.rd.transferDone(l, x)
			}
		}
	}
	return nil
}
