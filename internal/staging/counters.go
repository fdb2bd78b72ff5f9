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
func (k *Counters) Copy(c Copier, segs []Seg) error { return k.CopyProgress(c, segs, nil) }

// CopyProgress is Copy with progress run during the copy when c is a
// ProgressCopier (else once after it).
func (k *Counters) CopyProgress(c Copier, segs []Seg, progress func()) error {
	start := time.Now()
	var err error
	if pc, ok := c.(ProgressCopier); ok && progress != nil {
		err = pc.CopyProgress(segs, progress)
	} else {
		err = c.Copy(segs)
		after(progress)
	}
	var n uint64
	for _, s := range segs {
		n += s.Len
	}
	return k.count(start, n, err)
}

// CopyBlocks runs a block copy on c (by block ids when c is a
// BlockCopier, else by segments) and counts it as Copy does.
func (k *Counters) CopyBlocks(c Copier, b BlockCopy) error { return k.CopyBlocksProgress(c, b, nil) }

// CopyBlocksProgress is CopyBlocks with progress run as CopyProgress runs
// it.
func (k *Counters) CopyBlocksProgress(c Copier, b BlockCopy, progress func()) error {
	start := time.Now()
	var err error
	if pc, ok := c.(ProgressCopier); ok && progress != nil {
		err = pc.CopyBlocksProgress(b, progress)
	} else if bc, ok := c.(BlockCopier); ok {
		err = bc.CopyBlocks(b)
		after(progress)
	} else {
		err = c.Copy(b.Segs(nil))
		after(progress)
	}
	return k.count(start, b.Bytes(), err)
}

// after runs progress (when set) once a copier that cannot run it during
// the copy has finished.
func after(progress func()) {
	if progress != nil {
		progress()
	}
}

// count counts a copy that began at start: its time, and its bytes or its
// failure.
func (k *Counters) count(start time.Time, bytes uint64, err error) error {
	k.CopyUS.Add(uint64(time.Since(start).Microseconds()))
	if err != nil {
		k.Failures.Inc()
		return err
	}
	k.Copied.Add(bytes)
	return nil
}
