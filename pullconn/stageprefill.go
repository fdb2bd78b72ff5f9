package pullconn

import (
	"fmt"

	"github.com/gonixl/gonixl/internal/staging"
)

// gather decides, with the engine's other ranks, whether request id is
// staged and, if so, gathers blocks into the slot; it returns the slot
// index. An error means the gather failed (its slot is released).
func (p *Producer) gather(id string, blocks []int) (int, bool, error) {
	l := &p.cfg.Layout
	size := staging.SrcImageSize(l, len(blocks))
	return p.gatherInto(id, size, runs(blocks)*len(l.Regions), len(blocks) > 0, func(base uint64) error {
		return p.stage.CopyBlocks(p.cfg.Staging.Copier, staging.SrcGatherBlocks(l, blocks, base))
	})
}

// gatherInto is gather of an image of size bytes that reading directly
// would take descs descriptors for (some: it has blocks); gatherAt
// gathers it at base.
func (p *Producer) gatherInto(id string, size uint64, descs int, some bool, gatherAt func(base uint64) error) (int, bool, error) {
	i, staged, err := p.decideSlot(id, size, descs, some)
	if !staged || err != nil {
		return 0, false, err
	}
	if err := gatherAt(p.slotBase(i)); err != nil {
		p.e.slots.release(i)
		return 0, false, fmt.Errorf("%w: request %q: gather into staging slot %d: %v", errStaging, id, i, err)
	}
	p.stage.Staged.Inc()
	return i, true, nil
}

// decideSlot decides, with the engine's other ranks, whether request id,
// an image of size bytes that reading directly would take descs
// descriptors for (some: it has blocks), is staged, and returns the slot
// index this rank then holds.
func (p *Producer) decideSlot(id string, size uint64, descs int, some bool) (int, bool, error) {
	tp := p.e.core.Config().TPSize
	// An engine of several TP ranks stages only when it promised to send
	// the Params after every rank's RequestFinished: else one rank's
	// Params (naming the slot) could reach decode before another rank
	// had started its gather, and decode would ask that rank about a
	// hold it does not have yet. Direct READs need no such order: the
	// blocks hold the KV once the forward pass ends.
	want := (tp == 1 || p.cfg.ParamsAfterAllRanks) && some && size <= p.cfg.Staging.SlotBytes &&
		p.model.Choose(descs, size, 1) == staging.Staged
	i, staged := p.e.slots.decide(id, tp, want)
	if !staged {
		if want {
			p.stage.NoSlot.Inc()
		}
		return 0, false, nil
	}
	if size > p.cfg.Staging.SlotBytes {
		// Another rank decided for this one, whose image does not fit.
		p.e.slots.release(i)
		return 0, false, fmt.Errorf("%w: request %q: an image of %d bytes does not fit a staging slot of %d", errStaging, id, size, p.cfg.Staging.SlotBytes)
	}
	return i, true, nil
}

// slotBase is the address of this rank's slot i.
func (p *Producer) slotBase(i int) uint64 {
	return p.cfg.Staging.Base + uint64(i)*p.cfg.Staging.SlotBytes
}

// runs counts the runs of consecutive block ids: the descriptors per
// region that reading the blocks directly takes.
func runs(blocks []int) int {
	n := 0
	for i, b := range blocks {
		if i == 0 || b != blocks[i-1]+1 {
			n++
		}
	}
	return n
}

// releaseSlot gives back a slot index this rank took (nil: none).
func (p *Producer) releaseSlot(slot *int) {
	if slot != nil {
		p.e.slots.release(*slot)
	}
}

// releasedSlots frees the staging slots of ids, whose holds ended, and
// returns the ids whose blocks are free now: those of a hold whose
// background gather still runs are left out, and its slot kept, until the
// gather ends (endGather hands them out then). p.mu is held.
func (p *Producer) releasedSlots(ids []string) []string {
	if p.slots == nil {
		return ids
	}
	out := ids[:0:0]
	for _, id := range ids {
		if g := p.gathers[id]; g != nil {
			// Readiness queries waiting on the hold answer at once.
			p.e.slots.changed()
			if g.running {
				// Nobody may read the slot now: stop after this chunk.
				g.ended++
				g.stop.Store(true)
				continue
			}
			delete(p.gathers, id)
		}
		if i, ok := p.slots[id]; ok {
			delete(p.slots, id)
			p.e.slots.release(i)
		}
		out = append(out, id)
	}
	return out
}

// leaveSlots takes the rank out of the engine's staging.
func (p *Producer) leaveSlots() {
	if p.stage != nil {
		p.e.slots.leave()
	}
}
