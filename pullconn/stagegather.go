package pullconn

import (
	"errors"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/staging"
)

// A staged request of one KV-cache group is gathered in the background:
// RequestFinished decides the slot, makes the hold and returns the Params
// at once, marked RemoteStagingAwait, while a goroutine gathers the image
// chunk by chunk (Staging.Chunks ranges of regions, as decode reads it:
// images are region-major, so the regions gathered so far are always a
// prefix). Decode asks how far each rank got with readiness queries on
// the side channel (ready.go) and READs a chunk of a slot only once its
// regions are there. So the gather overlaps the Params' way to decode and
// decode's READs of the chunks before.
//
// The slot and the blocks are the gather's until it ends: a hold that ends
// while its gather runs (completion, lease, DropHolds) keeps its slot, and
// its id stays out of DrainFreed, until the chunk being copied is done (the
// gather stops there: nobody may read the slot any more); Close stops the
// gather after that chunk too, and waits for it. A failed chunk
// makes the rank answer handshake.ReadyFailed: decode fails the load with
// ErrStaging, and the blocks stay held until the hold ends as usual.

// gatherJob is one request's background gather on one rank. Its fields
// other than stop are p.mu's.
type gatherJob struct {
	slot    int
	key     uint64 // the hold's key, once the Params are made
	regions int    // regions of the image
	// gathered is how many regions are in the slot (a prefix); failed
	// says a chunk's copy failed (gathered stops there).
	gathered int
	failed   bool
	// running: the goroutine may still copy. ended counts the holds of
	// the id that ended meanwhile: their ids go to DrainFreed, and the
	// slot back to the engine, when it stops.
	running bool
	ended   int
	// stop asks the goroutine to copy no further chunk (Close).
	stop atomic.Bool
}

// errGatherStopped is a gather stopped between chunks: its hold ended, or
// the rank is closing.
var errGatherStopped = errors.New("the hold ended or the rank is closing")

// background reports whether a staged request of one group gathers in the
// background: always in gonixl's protocol; a vLLM decode never sees the
// slot, so there nothing is awaited.
func (p *Producer) background() bool { return !p.e.core.VLLM() }

// prepareGather decides whether request id (blocks, one group) is staged
// and, if so, returns its slot and the job that gathers it, not started.
// A previous gather of the id still running (its hold ended mid-gather)
// makes the request read directly: its slot is not free yet.
func (p *Producer) prepareGather(id string, blocks []int) (*gatherJob, error) {
	l := &p.cfg.Layout
	size := staging.SrcImageSize(l, len(blocks))
	i, staged, err := p.decideSlot(id, size, runs(blocks)*len(l.Regions), len(blocks) > 0)
	if !staged || err != nil {
		return nil, err
	}
	p.mu.Lock()
	busy := p.gathers[id] != nil
	p.mu.Unlock()
	if busy {
		p.e.slots.release(i)
		return nil, nil
	}
	return &gatherJob{slot: i, regions: len(l.Regions), running: true}, nil
}

// startGather starts job's goroutine, gathering blocks. p.mu is held; the
// rank is not closed.
func (p *Producer) startGather(id string, job *gatherJob, blocks []int) {
	p.gathers[id] = job
	p.gatherWG.Add(1)
	b := staging.SrcGatherBlocks(&p.cfg.Layout, blocks, p.slotBase(job.slot))
	n := staging.ChunkCount(job.regions, p.cfg.Staging.Chunks)
	go p.runGather(id, job, b, n)
}

// runGather gathers b, n chunks of regions in order, publishing each
// chunk's end to readiness queries. It runs on its own goroutine.
func (p *Producer) runGather(id string, job *gatherJob, b staging.BlockCopy, n int) {
	defer p.gatherWG.Done()
	var err error
	for c := range n {
		if job.stop.Load() {
			err = errGatherStopped
			break
		}
		r0, r1 := staging.ChunkRegions(job.regions, n, c)
		if r0 == r1 {
			continue
		}
		if err = p.stage.CopyBlocks(p.cfg.Staging.Copier, b.Regions(r0, r1)); err != nil {
			break
		}
		p.mu.Lock()
		job.gathered = r1
		p.mu.Unlock()
		p.e.slots.changed()
	}
	p.endGather(id, job, err)
}

// endGather records the end of job's gather and hands over what holds
// that ended meanwhile left to it.
func (p *Producer) endGather(id string, job *gatherJob, err error) {
	p.mu.Lock()
	job.running = false
	job.failed = err != nil
	if err == nil {
		p.stage.Staged.Inc()
	}
	if job.ended > 0 {
		// Every hold of the id that needed the slot ended while the
		// gather ran: the slot and the blocks are free now.
		delete(p.gathers, id)
		if i, ok := p.slots[id]; ok && i == job.slot {
			delete(p.slots, id)
			p.e.slots.release(i)
		}
		for range job.ended {
			p.freed = append(p.freed, id)
		}
	}
	p.mu.Unlock()
	p.e.slots.changed()
	if err != nil && !errors.Is(err, errGatherStopped) {
		p.log.Warn("pullconn: background gather failed; decode will fail the load with ErrStaging", zap.String("request_id", id), zap.Int("slot", job.slot), zap.Error(err))
	}
}

// stopGathers stops every background gather after its current chunk and
// waits for them (Close).
func (p *Producer) stopGathers() {
	p.mu.Lock()
	for _, g := range p.gathers {
		g.stop.Store(true)
	}
	p.mu.Unlock()
	p.gatherWG.Wait()
}

// gatherState answers a readiness query for this rank: how many regions
// of the hold's image are gathered, or handshake.ReadyFailed, or
// handshake.ReadyNotHeld when the rank has no such hold gathering into a
// slot.
func (p *Producer) gatherState(id string, key uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, g := p.hold.h.reqs[id], p.gathers[id]
	switch {
	case p.hold.closed || r == nil || g == nil || g.ended > 0 || r.key == 0 || r.key != key || g.key != key:
		return handshake.ReadyNotHeld
	case g.failed:
		return handshake.ReadyFailed
	}
	return g.gathered
}

// gatherError is the error a load gets from a rank whose gather failed.
func gatherError(id string, rank int) error {
	return fmt.Errorf("%w: request %q: prefill rank %d's gather into its staging slot failed", errStaging, id, rank)
}
