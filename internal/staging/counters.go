package staging

import (
	"time"

	"github.com/gonixl/gonixl/internal/stats"
)

// Counters are the staging path's counters in a connector's stats set.
type Counters struct {
	Staged   *stats.Counter // transfers that went through staging slots
	Direct   *stats.Counter // transfers by direct descriptors
	NoSlot   *stats.Counter // wanted staging but found no free slot: went direct
	Failures *stats.Counter // gathers and scatters that failed (their request failed)
	Copied   *stats.Counter // bytes gathered or scattered
	CopyUS   *stats.Counter // microseconds spent in gathers and scatters
	PlanUS   *stats.Counter // microseconds spent planning staged transfers
}

// NewCounters adds the counters to s.
func NewCounters(s *stats.Set) *Counters {
	return &Counters{
		Staged:   s.Counter("staged_transfers", "Transfers moved through staging slots (gather, one large transfer, scatter)."),
		Direct:   s.Counter("direct_transfers", "Transfers moved by one descriptor per block fragment."),
		NoSlot:   s.Counter("staging_no_slot", "Transfers that would have been staged but found no free staging slot, and moved directly."),
		Failures: s.Counter("staging_failures", "Gathers or scatters that failed; their request failed."),
		Copied:   s.Counter("staging_copied_bytes", "Bytes gathered into or scattered out of staging slots."),
		CopyUS:   s.Counter("staging_copy_microseconds", "Time spent in gathers and scatters (the copier), in microseconds."),
		PlanUS:   s.Counter("staging_plan_microseconds", "Time spent planning staged transfers (segment lists), in microseconds."),
	}
}

// Planned counts the time since start as planning.
func (k *Counters) Planned(start time.Time) { k.PlanUS.Add(uint64(time.Since(start).Microseconds())) }

// Copy runs c over segs and counts the bytes, or the failure.
func (k *Counters) Copy(c Copier, segs []Seg) error {
	start := time.Now()
	err := c.Copy(segs)
	k.CopyUS.Add(uint64(time.Since(start).Microseconds()))
	if err != nil {
		k.Failures.Inc()
		return err
	}
	var n uint64
	for _, s := range segs {
		n += s.Len
	}
	k.Copied.Add(n)
	return nil
}

// CopyBlocks runs a block copy on c (by block ids when c is a
// BlockCopier, else by segments) and counts it as Copy does.
func (k *Counters) CopyBlocks(c Copier, b BlockCopy) error {
	start := time.Now()
	var err error
	if bc, ok := c.(BlockCopier); ok {
		err = bc.CopyBlocks(b)
	} else {
		err = c.Copy(b.Segs(nil))
	}
	k.CopyUS.Add(uint64(time.Since(start).Microseconds()))
	if err != nil {
		k.Failures.Inc()
		return err
	}
	k.Copied.Add(b.Bytes())
	return nil
}
