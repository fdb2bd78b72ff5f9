package pushconn

import (
	"slices"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// Per-layer progressive push. Prefill's forward pass ends layer by layer,
// so the engine may report a chunk's blocks final in the rank's first
// layers before they are final in all (Producer.Progress with
// withLayers). What is final of a request, and what a registration has
// had written of it, is then a layerMark: blocks [0, full) in every layer,
// blocks [full, tail) in layers [0, layers). A progressive WRITE moves the
// difference between what the registration had and what is final (the
// remaining layers of the blocks that became final in every layer, the
// new layers of the tail), and the final WRITE the difference between what
// it had and everything; so every (block, region) moves exactly once. A
// tail never grows while it is final in some layers only (Progress refuses
// that), so the difference is at most three runs.

// layerMark is what of a request's blocks is final, or written: blocks
// [0, full) in every layer, [full, tail) in layers [0, layers).
type layerMark struct{ full, tail, layers int }

// layerRun is the request's blocks [from, to) in the rank's layers
// [lo, hi).
type layerRun struct{ from, to, lo, hi int }

// layersOf returns how many layers of block b m covers.
func (m layerMark) layersOf(b, numLayers int) int {
	switch {
	case b < m.full:
		return numLayers
	case b < m.tail:
		return m.layers
	}
	return 0
}

// clip returns m for blocks [0, end) only.
func (m layerMark) clip(end int) layerMark {
	m.full, m.tail = min(m.full, end), min(m.tail, end)
	if m.tail <= m.full || m.layers == 0 {
		m.tail, m.layers = m.full, 0
	}
	return m
}

// layerRuns returns what turns had into want for the request's blocks
// [first, end) (after decode's prefix hit, within what it registered), in
// block order: runs of blocks whose missing layers are the same.
func layerRuns(had, want layerMark, numLayers, first, end int) []layerRun {
	if first >= end {
		return nil
	}
	cuts := []int{first, end}
	for _, b := range []int{had.full, had.tail, want.full, want.tail} {
		if b > first && b < end {
			cuts = append(cuts, b)
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var runs []layerRun
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		lo, hi := had.layersOf(a, numLayers), want.layersOf(a, numLayers)
		if hi <= lo {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].to == a && runs[n-1].lo == lo && runs[n-1].hi == hi {
			runs[n-1].to = b
			continue
		}
		runs = append(runs, layerRun{from: a, to: b, lo: lo, hi: hi})
	}
	return runs
}

// partRuns returns what registration pr, which had had written, takes in
// its next progressive WRITE of h (decode's blocks are h's [cached,
// total)), and what it then has had; whole: pr takes blocks final in
// every layer only (its parts are staged, or may be).
func partRuns(had layerMark, h *hold, whole bool, numLayers, cached, total int) ([]layerRun, layerMark) {
	want := h.mark()
	if whole {
		want = layerMark{h.final, h.final, 0}
	}
	want = want.clip(total)
	return layerRuns(had, want, numLayers, cached, total), want
}

// restRuns returns what the final WRITE of a request of all blocks moves
// for a registration that had had written (decode's blocks are the
// request's [cached, cached+registered)): the rest, or, when it had
// everything, the last block again, for the completion to ride a WRITE.
func restRuns(had layerMark, all, numLayers, cached, registered int) []layerRun {
	runs := layerRuns(had, layerMark{all, all, 0}, numLayers, cached, cached+registered)
	if len(runs) == 0 {
		runs = []layerRun{{from: all - 1, to: all, lo: 0, hi: numLayers}}
	}
	return runs
}

// mark returns what of h is final.
func (h *hold) mark() layerMark {
	if h.layers == 0 {
		return layerMark{h.final, h.final, 0}
	}
	return layerMark{h.final, len(h.blocks), h.layers}
}

// mark returns what pr had written of its progress hold.
func (pr *pendingReg) mark() layerMark { return layerMark{pr.written, pr.tailTo, pr.tailLayers} }

// setMark records that pr had m written.
func (pr *pendingReg) setMark(m layerMark) {
	pr.written, pr.tailTo, pr.tailLayers = m.full, m.tail, m.layers
}

// wroteAny reports whether pr had any of its request's blocks after
// decode's cached ones written in a progressive WRITE.
func (pr *pendingReg) wroteAny(cached int) bool {
	return pr.written > cached || pr.tailLayers > 0 && pr.tailTo > cached
}

// behind reports whether h has something final that pr may not have had
// (a cheap test; postPart finds the exact runs).
func (pr *pendingReg) behind(h *hold) bool {
	m := h.mark()
	return m.full > pr.written || m.layers > 0 && (m.tail > pr.tailTo || m.layers > pr.tailLayers)
}

// runMapper maps the runs of a per-layer WRITE (the writer's, reused from
// WRITE to WRITE on the poller goroutine).
type runMapper struct{ run descriptors.Transfer }

// mapRuns maps runs of a request's blocks src (in their layers) from
// layout from onto decode's dstBlocks after its prefix hit of cached, on
// layout to, into t: the runs' lists one after the other.
func (m *runMapper) mapRuns(t *descriptors.Transfer, from, to *descriptors.Layout, src, dstBlocks []int, cached int, runs []layerRun) error {
	if len(runs) == 1 {
		// The common case (a chunk's report, a final WRITE after one):
		// straight into t, without a second copy of the lists on the
		// poller goroutine.
		r := runs[0]
		req := descriptors.Request{SrcBlocks: src[r.from:r.to], DstBlocks: dstBlocks[r.from-cached : r.to-cached]}
		_, err := descriptors.MapLayersInto(t, from, to, req, r.lo, r.hi)
		return err
	}
	s, d := t.Src.Descs[:0], t.Dst.Descs[:0]
	var bytes uint64
	for _, r := range runs {
		req := descriptors.Request{SrcBlocks: src[r.from:r.to], DstBlocks: dstBlocks[r.from-cached : r.to-cached]}
		if _, err := descriptors.MapLayersInto(&m.run, from, to, req, r.lo, r.hi); err != nil {
			return err
		}
		s, d = append(s, m.run.Src.Descs...), append(d, m.run.Dst.Descs...)
		bytes += m.run.Bytes
	}
	*t = descriptors.Transfer{Src: nixl.XferList{Mem: from.Mem, Descs: s}, Dst: nixl.XferList{Mem: to.Mem, Descs: d}, Bytes: bytes}
	return nil
}
