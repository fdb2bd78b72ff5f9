package pushconn

import (
	"fmt"
	"time"

	"go.uber.org/zap"

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
}

// chunkState is the chunks of one prefill rank's part seen so far: their
// count (fixed by the first) and a bit per chunk scattered.
type chunkState struct {
	n   int
	got uint64
}

type stagePart struct {
	off uint64
	im  staging.DstImage
	// scatter copies the part into the blocks, by block ids (the copier
	// computes the addresses); set when the slot is offered.
	scatter staging.BlockCopy
}

// offerStaging returns the staging key of r's registration, taking a slot
// and planning the scatter the first time; nil when r is not staged (no
// slot free, too large, no blocks). It runs on the poller goroutine.
func (c *Consumer) offerStaging(p *decodePeer, r *decodeReq) *pushwire.Staging {
	if c.pool == nil || len(r.blocks) == 0 || len(r.blocks[0]) == 0 {
		return nil
	}
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
		im, err := staging.NewDstImage(&pl.Ranks[rank].Layout, &c.cfg.Layout, len(r.blocks[0]))
		if err != nil {
			return nil
		}
		offer.Offsets[rank], offer.Sizes[rank] = at, im.Size()
		parts[agent] = stagePart{off: at, im: im, scatter: im.ScatterBlocks(&c.cfg.Layout, r.blocks[0], at)}
		at += (im.Size() + 15) &^ 15 // keep every part 16-byte aligned for the kernel
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
	for agent, part := range parts {
		part.scatter.Slot += slot.Addr
		parts[agent] = part
	}
	offer.Slot = slot.Index
	r.stage = &decodeStage{slot: slot, offer: offer, parts: parts}
	o := offer
	return &o
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
// of a prefill rank's part arrived in the offered slot. The chunk's
// regions are scattered into the blocks at once, while the rank's later
// chunks still move; the rank's completion counts once all k are.
func (c *Consumer) onStagedChunk(sender string, msg []byte) {
	ch, err := pushwire.DecodeStagedChunk(msg)
	if err != nil {
		c.stats.MalformedNotifications.Inc()
		c.log.Debug("pushconn: dropped a malformed PUSH_STAGED_CHUNK", zap.String("sender", sender), zap.Error(err))
		return
	}
	c.mu.Lock()
	r := c.tracker.stagedPart(ch.ID, sender)
	var scatter staging.BlockCopy
	var st *chunkState
	if r != nil {
		part, ok := r.stage.parts[sender]
		if !ok {
			r = nil
		} else if err := staging.CheckChunk(len(part.scatter.Bases), ch.Chunks, ch.Chunk); err != nil {
			c.mu.Unlock()
			c.stats.MalformedNotifications.Inc()
			c.log.Debug("pushconn: dropped a PUSH_STAGED_CHUNK that does not fit the part", zap.String("sender", sender), zap.Error(err))
			return
		} else {
			if r.stage.chunks == nil {
				r.stage.chunks = map[string]*chunkState{}
			}
			if st = r.stage.chunks[sender]; st == nil {
				st = &chunkState{n: ch.Chunks}
				r.stage.chunks[sender] = st
			}
			if st.n != ch.Chunks || st.got&(1<<ch.Chunk) != 0 {
				// Another count than the rank's first chunk said, or a
				// chunk seen already: scattering it again could only
				// write what is there, or the wrong regions.
				c.mu.Unlock()
				c.stats.UnknownNotifications.Inc()
				return
			}
			r0, r1 := staging.ChunkRegions(len(part.scatter.Bases), ch.Chunks, ch.Chunk)
			scatter = part.scatter.Regions(r0, r1)
		}
	}
	c.mu.Unlock()
	if r == nil {
		c.stats.UnknownNotifications.Inc()
		return
	}
	c.scatterPart(ch.ID, sender, fmt.Sprintf("chunk %d of %d", ch.Chunk, ch.Chunks), scatter, func() bool {
		st.got |= 1 << ch.Chunk
		return st.got == 1<<st.n-1
	})
}

// onStaged handles "PUSH_STAGED:<id>:<n>" from a prefill rank that wrote
// its part of the request into the offered slot: the part is scattered
// into the blocks, and only then counted like a completion.
func (c *Consumer) onStaged(sender string, msg []byte) {
	comp, err := pushwire.DecodeStaged(msg)
	if err != nil {
		c.stats.MalformedNotifications.Inc()
		c.log.Debug("pushconn: dropped a malformed PUSH_STAGED", zap.String("sender", sender), zap.Error(err))
		return
	}
	c.mu.Lock()
	r := c.tracker.stagedPart(comp.ID, sender)
	var scatter staging.BlockCopy
	if r != nil {
		if part, ok := r.stage.parts[sender]; ok {
			scatter = part.scatter
		} else {
			r = nil
		}
	}
	c.mu.Unlock()
	if r == nil {
		// Not a part this rank expects in a slot (the request ended, or
		// the sender was never offered one): nothing is scattered.
		c.stats.UnknownNotifications.Inc()
		return
	}
	c.scatterPart(comp.ID, sender, "part", scatter, nil)
}

// scatterPart scatters what prefill agent sender wrote of request id into
// the offered slot (a part or a chunk of it, what says which) and, once
// last reports the part whole (nil: at once), counts the sender like a
// completion. A failed scatter fails the request. It runs on the poller
// goroutine, the only one that scatters; the slot and the blocks stay the
// request's while the sender is still expected: its result cannot go out
// before the sender is counted.
func (c *Consumer) scatterPart(id, sender, what string, scatter staging.BlockCopy, last func() bool) {
	err := c.stage.CopyBlocks(c.cfg.Staging.Copier, scatter)
	c.mu.Lock()
	now := c.cfg.Clock.Now()
	if err != nil {
		c.tracker.scatterFailed(now, id, sender, fmt.Errorf("%w: request %q: %s from prefill agent %q: %v", ErrStaging, id, what, sender, err))
		c.mu.Unlock()
		c.log.Warn("pushconn: staged "+what+" could not be scattered", zap.String("request", id), zap.String("sender", sender), zap.Error(err))
		c.signal()
		return
	}
	if last != nil && !last() {
		c.mu.Unlock()
		return
	}
	a := c.tracker.complete(now, id, sender)
	c.mu.Unlock()
	c.stage.Staged.Inc()
	c.counted(a)
}
