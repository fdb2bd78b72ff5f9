package pushconn

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// decodeStage is the staging slot a decode rank offered for one request
// and, per prefill agent, where that rank's image lies in it.
type decodeStage struct {
	slot  staging.Slot
	offer pushwire.Staging
	parts map[string]stagePart
	// chunks is, per prefill agent whose WRITE came in chunks, the chunks
	// scattered so far.
	chunks map[string]*chunkState
	// scattered is, per prefill agent that sent staged parts, the image
	// blocks its parts scattered, in every region (stagedparts.go); its
	// chunks scatter the others.
	scattered map[string][]bool
}

// chunkState is the chunks of one prefill rank's part seen so far: their
// count (fixed by the first) and a bit per chunk scattered.
type chunkState struct {
	n   int
	got uint64
}

type stagePart struct {
	off uint64
	// regions are the image's regions, which its chunks range over.
	regions int
	// scatter copies the part into the blocks, by block ids (the copier
	// computes the addresses): one copy for a single-group request, one
	// per group and run for a grouped one (staging.GroupDstImage); set
	// when the slot is offered.
	scatter []staging.RegionCopy
}

// offerStaging returns the staging key of r's registration, taking a slot
// and planning the scatter the first time; nil when r is not staged (no
// slot free, too large, no blocks). It runs on the poller goroutine.
func (c *Consumer) offerStaging(p *decodePeer, r *decodeReq) *pushwire.Staging {
	if c.pool == nil || groupids.Empty(r.blocks) || p.payload.PPSize > 1 { // one stage only
		return nil
	}
	grouped := len(c.cfg.Layout.Groups) > 0 || len(r.blocks) != 1
	c.mu.Lock()
	if r.stage != nil {
		o := r.stage.offer
		c.mu.Unlock()
		return &o
	}
	c.mu.Unlock()
	// Planned without the lock (the payload and the blocks are the poller
	// goroutine's), at slot address 0, and moved to the slot once it is
	// taken.
	planStart := time.Now()
	pl := p.payload
	offer := pushwire.Staging{Offsets: make([]uint64, pl.TPSize), Sizes: make([]uint64, pl.TPSize)}
	parts := map[string]stagePart{}
	var at uint64
	for _, agent := range p.sources {
		rank := -1
		for i := range pl.Ranks {
			if pl.Ranks[i].Agent == agent {
				rank = i
			}
		}
		if rank < 0 {
			return nil
		}
		part, size, err := c.stagePart(&pl.Ranks[rank].Layout, r.blocks, grouped, at)
		if err != nil {
			return nil
		}
		offer.Offsets[rank], offer.Sizes[rank] = at, size
		parts[agent] = part
		at += (size + 15) &^ 15 // keep every part 16-byte aligned for the kernel
	}
	if at > c.pool.SlotBytes() {
		return nil // larger than a slot: the blocks take the WRITEs
	}
	c.stage.Planned(planStart)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.tracker.live(r) {
		return nil
	}
	slot, ok := c.pool.Acquire(r.id)
	if !ok {
		c.stage.NoSlot.Inc()
		return nil
	}
	for _, part := range parts {
		for i := range part.scatter {
			part.scatter[i].Slot += slot.Addr
		}
	}
	offer.Slot = slot.Index
	// Parts scatter by image block, which an image of several groups
	// has not (staging.GroupDstImage); prefill stages no part of one
	// either (Producer.Progress takes one group).
	offer.Parts = !grouped && !c.noStagingParts
	r.stage = &decodeStage{slot: slot, offer: offer, parts: parts}
	o := offer
	return &o
}

// stagePart plans the part of a slot, at offset at, that prefill rank
// layout src writes for blocks: its image (staging.GroupDstImage for a
// grouped request, else staging.DstImage) and the scatter of it; it
// returns the image's size.
func (c *Consumer) stagePart(src *descriptors.Layout, blocks [][]int, grouped bool, at uint64) (stagePart, uint64, error) {
	if grouped {
		im, err := staging.NewGroupDstImage(src, &c.cfg.Layout, blocks)
		if err != nil {
			return stagePart{}, 0, err
		}
		return stagePart{off: at, regions: im.Regions(), scatter: im.ScatterBlocks(&c.cfg.Layout, at)}, im.Size(), nil
	}
	im, err := staging.NewDstImage(src, &c.cfg.Layout, len(blocks[0]))
	if err != nil {
		return stagePart{}, 0, err
	}
	sc := []staging.RegionCopy{{BlockCopy: im.ScatterBlocks(&c.cfg.Layout, blocks[0], at)}}
	return stagePart{off: at, regions: im.Regions, scatter: sc}, im.Size(), nil
}

// releaseStage frees a request's slot as its result goes out (c.mu held,
// from the tracker).
func (c *Consumer) releaseStage(r *decodeReq) {
	if r.stage == nil {
		return
	}
	if err := c.pool.Release(r.stage.slot); err != nil {
		c.log.Error("pushconn: staging slot released twice", zap.String("request", r.id), zap.Error(err))
	}
	r.stage = nil
}

// onStagedChunk handles "PUSH_STAGED_CHUNK:<c>:<k>:<id>:<n>": chunk c of k
// of a prefill rank's part arrived in the offered slot.
func (c *Consumer) onStagedChunk(sender string, msg []byte) {
	ch, err := pushwire.DecodeStagedChunk(msg)
	if err != nil {
		c.stats.MalformedNotifications.Inc()
		c.log.Debug("pushconn: dropped a malformed PUSH_STAGED_CHUNK", zap.String("sender", sender), zap.Error(err))
		return
	}
	c.stagedArrived(sender, ch)
}

// onStaged handles "PUSH_STAGED:<id>:<n>": a prefill rank wrote its whole
// part into the offered slot, a part of one chunk.
func (c *Consumer) onStaged(sender string, msg []byte) {
	comp, err := pushwire.DecodeStaged(msg)
	if err != nil {
		c.stats.MalformedNotifications.Inc()
		c.log.Debug("pushconn: dropped a malformed PUSH_STAGED", zap.String("sender", sender), zap.Error(err))
		return
	}
	c.stagedArrived(sender, pushwire.StagedChunk{Completion: comp, Chunk: 0, Chunks: 1})
}

// stagedArrived scatters chunk ch.Chunk of ch.Chunks of what prefill agent
// sender wrote of request ch.ID into the offered slot: that chunk's regions
// go into the blocks at once, while the rank's later chunks still move,
// and the rank counts like a completion once all its chunks are
// scattered. The first chunk fixes the rank's count. A chunk that does not
// fit the part, another count, a chunk seen already, a request that does
// not expect the sender in a slot, or a chunk of another registration of
// the id (its seq, or none, is not the request's: a late copy of an
// earlier request's, which would scatter a slot no rank wrote for this
// one) is counted and changes nothing; a failed scatter fails the request.
//
// It runs on the poller goroutine, the only one that scatters. The slot
// and the blocks stay the request's while the sender is still expected:
// its result cannot go out before the sender is counted.
func (c *Consumer) stagedArrived(sender string, ch pushwire.StagedChunk) {
	c.mu.Lock()
	r, stale := c.tracker.stagedPart(ch.ID, sender, ch.Seq)
	if stale {
		c.mu.Unlock()
		c.core.counted(sender, ch.Completion, arrivalStale)
		return
	}
	var part stagePart
	if r != nil {
		var ok bool
		if part, ok = r.stage.parts[sender]; !ok {
			r = nil
		}
	}
	if r == nil {
		c.mu.Unlock()
		c.stats.UnknownNotifications.Inc()
		return
	}
	regions := part.regions
	if err := staging.CheckChunk(regions, ch.Chunks, ch.Chunk); err != nil {
		c.mu.Unlock()
		c.stats.MalformedNotifications.Inc()
		c.log.Debug("pushconn: dropped a staged chunk that does not fit the part", zap.String("sender", sender), zap.Error(err))
		return
	}
	if r.stage.chunks == nil {
		r.stage.chunks = map[string]*chunkState{}
	}
	st := r.stage.chunks[sender]
	if st == nil {
		st = &chunkState{n: ch.Chunks}
		r.stage.chunks[sender] = st
	}
	if st.n != ch.Chunks || st.got&(1<<ch.Chunk) != 0 {
		// Another count than the rank's first chunk said, or a chunk seen
		// already: scattering it again could only write what is there, or
		// the wrong regions.
		c.mu.Unlock()
		c.stats.UnknownNotifications.Inc()
		return
	}
	done := r.stage.scattered[sender]
	c.mu.Unlock()
	r0, r1 := staging.ChunkRegions(regions, ch.Chunks, ch.Chunk)
	var err error
	for _, bc := range unscattered(staging.ChunkCopies(part.scatter, r0, r1), done) {
		if err = c.stage.CopyBlocks(c.cfg.Staging.Copier, bc); err != nil {
			break
		}
	}
	c.mu.Lock()
	now := c.now()
	if err != nil {
		// The chunk is accounted for; the rank has written all it will
		// only once every chunk of it arrived. Until then its later chunks
		// may still be moving into the slot, so the request fails with the
		// rank still expected and drains (PUSH_CANCEL) rather than handing
		// the slot to another request under a WRITE in flight.
		st.got |= 1 << ch.Chunk
		c.tracker.scatterFailed(now, ch.ID, sender, ch.Seq, st.got == 1<<st.n-1, fmt.Errorf("%w: request %q: chunk %d of %d from prefill agent %q: %v", errStaging, ch.ID, ch.Chunk, ch.Chunks, sender, err))
		c.mu.Unlock()
		c.log.Warn("pushconn: staged chunk could not be scattered", zap.String("request", ch.ID), zap.String("sender", sender), zap.Error(err))
		c.signal()
		return
	}
	if st.got |= 1 << ch.Chunk; st.got != 1<<st.n-1 {
		c.mu.Unlock()
		return
	}
	a := c.tracker.complete(now, ch.ID, sender, ch.Seq)
	c.mu.Unlock()
	c.stage.Staged.Inc()
	c.core.counted(sender, ch.Completion, a)
}
