package pushconn

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// Progressive push with staging. A registration whose decode rank offered
// a staging slot gets its progressive WRITEs as staged parts: the blocks
// a report made final are gathered into a prefill slot, at their offsets
// in decode's image of this rank (region-major: region r's image block j
// at r*stride + j*perBlock), and written as one run per region into
// decode's slot. When decode's offer says it scatters parts
// (pushwire.Staging.Parts), the part's WRITE carries PUSH_STAGED_PART
// naming its image blocks [j0, j1), and decode scatters them into its
// blocks when it lands (stagedparts.go); else it carries nothing, as for
// a decode that predates parts. The final WRITE, at RequestFinished,
// writes the image blocks not written yet the same way, chunk by chunk
// (ranges of regions, staging.ChunkRegions), each chunk with its staged
// completion: decode scatters a chunk's regions of every block no part
// scattered (all of them for a decode that took no part), exactly as for
// a staged WRITE of the whole image (the final WRITE waits for the part
// in flight). So after prefill's end only the last part is gathered,
// written and scattered.
//
// Which way a registration's parts go is fixed by the first part posted
// (pendingReg.partInto): staged parts and direct parts never mix, because
// the final staged WRITE's completions make decode scatter every block no
// staged part scattered (direct blocks would be overwritten by what the
// slot holds there), and a final direct WRITE's completion scatters
// nothing.
//
// Per-layer reports (writelayers.go) are not staged: a part names whole
// image blocks in every region, so a registration whose parts are staged,
// or may be, takes only blocks final in every layer (writer.wholeParts),
// and its per-layer tail waits for the report that makes it final in
// every layer, or for the final WRITE.
//
// Prefill's slots are taken per WRITE and given back when it ends, as for
// any staged WRITE (write.slot), so a request that computes holds none
// between its reports. A part that finds no slot free is put off
// (progressive_deferred): its blocks go with the next report's part, or
// with the final WRITE. A final WRITE that finds no slot free writes the
// rest from the blocks, one descriptor per block run and region, into
// decode's slot, chunk by chunk with the same staged completions: slower,
// still right, and no wait.

// Which way a registration's progressive WRITEs go (pendingReg.partInto).
const (
	partUndecided = iota // no part posted yet
	partDirect           // into decode's blocks (writer.postPart)
	partStaged           // into decode's slot (stagePart)
)

// imageRun is image blocks [j0, j1) of every region of a destination image
// whose blocks are the source's one to one (staging.SameBlocks): src are
// the source blocks that fill them, bases the source's regions, per the
// bytes of one block, stride the image's bytes per region, remote where
// the image lies in decode's slot.
type imageRun struct {
	j0, j1 int
	src    []int
	bases  []uint64
	per    uint64
	stride uint64
	remote uint64
	mem    nixl.MemType // this rank's
	dstMem nixl.MemType
	devID  uint64 // this rank's slot's
	dstDev uint64
	devIDs []uint64 // this rank's regions'
}

// bytes returns what the run moves.
func (r *imageRun) bytes() uint64 { return uint64(len(r.bases)) * uint64(r.j1-r.j0) * r.per }

// gather is the copy of regions [r0, r1) of the run into a slot at addr,
// at their image offsets.
func (r *imageRun) gather(addr uint64, r0, r1 int) staging.BlockCopy {
	return staging.BlockCopy{Bases: r.bases[r0:r1], Blocks: r.src, BlockLen: r.per, Len: r.per,
		Slot: addr + uint64(r0)*r.stride + uint64(r.j0)*r.per, SlotStride: r.stride, ToSlot: true}
}

// lists returns the WRITE of regions [r0, r1) of the run into decode's
// slot: from slot (one descriptor per region), or, with slot nil, from
// the blocks (one per run of consecutive blocks and region).
func (r *imageRun) lists(slot *staging.Slot, r0, r1 int) (nixl.XferList, nixl.XferList) {
	local, remote := nixl.XferList{Mem: r.mem}, nixl.XferList{Mem: r.dstMem}
	for reg := r0; reg < r1; reg++ {
		img := uint64(reg)*r.stride + uint64(r.j0)*r.per
		if slot != nil {
			n := uint64(r.j1-r.j0) * r.per
			local.Descs = append(local.Descs, nixl.Desc{Addr: slot.Addr + img, Len: n, DevID: r.devID})
			remote.Descs = append(remote.Descs, nixl.Desc{Addr: r.remote + img, Len: n, DevID: r.dstDev})
			continue
		}
		for k := 0; k < len(r.src); {
			e := k + 1
			for e < len(r.src) && r.src[e] == r.src[e-1]+1 {
				e++
			}
			n := uint64(e-k) * r.per
			local.Descs = append(local.Descs, nixl.Desc{Addr: r.bases[reg] + uint64(r.src[k])*r.per, Len: n, DevID: r.devIDs[reg]})
			remote.Descs = append(remote.Descs, nixl.Desc{Addr: r.remote + img + uint64(k)*r.per, Len: n, DevID: r.dstDev})
			k = e
		}
	}
	return local, remote
}

// stageImage returns decode's image of this rank for registration pr when
// its parts can be staged: decode offered a slot that fits, the blocks map
// one to one and whole (staging.SameBlocks), and the image fits a prefill
// slot. The run it returns covers no block yet (j0 = j1 = 0).
func (w *writer) stageImage(pr *pendingReg, dst *descriptors.Layout, dstBlocks int) (*imageRun, bool) {
	p := w.p
	if p.pool == nil || pr.reg.Staging == nil || !staging.SameBlocks(&p.cfg.Layout, dst) {
		return nil, false
	}
	im, err := staging.NewDstImage(&p.cfg.Layout, dst, dstBlocks)
	if err != nil || im.Off != 0 || im.PerBlock != p.cfg.Layout.BlockLen() || im.Size() > p.pool.SlotBytes() {
		return nil, false
	}
	remote, ok := w.offered(pr, im.Size())
	if !ok {
		return nil, false
	}
	devIDs := make([]uint64, len(p.cfg.Layout.Regions))
	for i, r := range p.cfg.Layout.Regions {
		devIDs[i] = r.DevID
	}
	return &imageRun{bases: staging.Bases(&p.cfg.Layout), per: im.PerBlock, stride: uint64(im.Blocks) * im.PerBlock,
		remote: remote, mem: p.cfg.Layout.Mem, dstMem: dst.Mem, devID: p.cfg.Layout.Regions[0].DevID,
		dstDev: dst.Regions[0].DevID, devIDs: devIDs}, true
}

// stagePart is the staged progressive WRITE of h's blocks [from, to) for
// pr (cached: decode's prefix hit, so image block j is h.blocks[cached+j],
// written into dstBlocks[j]).
// use false: the part goes direct (and so do pr's later ones). use true
// with sw nil: no prefill slot is free, and the part is put off.
func (w *writer) stagePart(pr *pendingReg, h *hold, dst *descriptors.Layout, dstBlocks []int, cached, from, to int) (sw *stagedWrite, use bool) {
	p := w.p
	if pr.partInto == partDirect {
		return nil, false
	}
	run, ok := w.stageImage(pr, dst, len(dstBlocks))
	if !ok {
		if pr.partInto == partStaged { // not reached: the offer and layouts are the registration's
			return nil, true
		}
		return nil, false
	}
	if pr.partInto == partUndecided {
		descs := staging.SameBlocksDescs(dst, h.blocks[from:to], dstBlocks[from-cached:to-cached])
		if p.model.Choose(descs, uint64(to-from)*uint64(len(dst.Regions))*run.per, len(dst.Regions)) != staging.Staged {
			return nil, false
		}
	}
	slot, ok := p.pool.Acquire(h.id)
	if !ok {
		p.stage.NoSlot.Inc()
		p.push.progressDeferred.Inc()
		return nil, true
	}
	run.j0, run.j1, run.src = from-cached, to-cached, h.blocks[from:to]
	return &stagedWrite{slot: &slot, bytes: run.bytes(), run: run, part: true,
		chunks: []staging.Chunk{{R0: 0, R1: len(run.bases)}}}, true
}

// postStagedRest posts the final WRITE of a request whose first pr.written
// blocks went into decode's slot in staged parts: the image blocks after
// them (at least the last), chunk by chunk with their staged completions,
// gathered into a prefill slot or, when none is free, from the blocks.
func (w *writer) postStagedRest(pr *pendingReg, h *hold, dst *descriptors.Layout, dstBlocks []int, cached int, start time.Time) postResult {
	sw, err := w.stagedRest(pr, h, dst, dstBlocks, cached)
	if err != nil {
		return postResult{what: postFailed, kind: pushwire.FailLayout, err: err}
	}
	return w.postMapped(pr, h, nil, nil, sw, start)
}

// stagedRest plans postStagedRest's WRITE (the simulation runs it on its
// modeled agent): its chunks, and the prefill slot it takes if one is free.
func (w *writer) stagedRest(pr *pendingReg, h *hold, dst *descriptors.Layout, dstBlocks []int, cached int) (*stagedWrite, error) {
	p := w.p
	run, ok := w.stageImage(pr, dst, len(dstBlocks))
	if !ok { // not reached: the offer and layouts are the registration's
		return nil, fmt.Errorf("decode rank %d's staging offer no longer fits the parts written into it", pr.rank)
	}
	end := cached + min(len(h.blocks)-cached, len(dstBlocks))
	from := min(pr.written, end-1)
	run.j0, run.j1, run.src = from-cached, end-cached, h.blocks[from:end]
	n := staging.ChunkCount(len(run.bases), p.cfg.Staging.Chunks)
	sw := &stagedWrite{bytes: run.bytes(), run: run}
	for c := range n {
		r0, r1 := staging.ChunkRegions(len(run.bases), n, c)
		sw.chunks = append(sw.chunks, staging.Chunk{R0: r0, R1: r1})
	}
	if slot, ok := p.pool.Acquire(h.id); ok {
		sw.slot = &slot
	} else {
		p.stage.NoSlot.Inc()
		p.log.Debug("pushconn: no staging slot for the rest of a progressive request; writing it from the blocks into decode's slot",
			zap.String("request", h.id), zap.Int("blocks", end-from))
	}
	return sw, nil
}
