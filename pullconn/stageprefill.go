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
	tp := p.e.core.Config().TPSize
	// An engine of several TP ranks stages only when it promised to send
	// the Params after every rank's RequestFinished: else one rank's
	// Params (naming the slot) could reach decode before another rank
	// gathered into its slot, and decode would read what the slot held
	// before. Direct READs need no such order: the blocks hold the KV
	// once the forward pass ends.
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
	base := p.cfg.Staging.Base + uint64(i)*p.cfg.Staging.SlotBytes
	if err := gatherAt(base); err != nil {
		p.e.slots.release(i)
		return 0, false, fmt.Errorf("%w: request %q: gather into staging slot %d: %v", errStaging, id, i, err)
	}
	p.stage.Staged.Inc()
	return i, true, nil
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
// returns ids. p.mu is held.
func (p *Producer) releasedSlots(ids []string) []string {
	if p.slots == nil {
		return ids
	}
	for _, id := range ids {
		if i, ok := p.slots[id]; ok {
			delete(p.slots, id)
			p.e.slots.release(i)
		}
	}
	return ids
}

// leaveSlots takes the rank out of the engine's staging.
func (p *Producer) leaveSlots() {
	if p.stage != nil {
		p.e.slots.leave()
	}
}
