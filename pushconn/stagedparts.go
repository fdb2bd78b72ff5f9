package pushconn

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// Staged parts on decode. A decode rank that offers a slot for a request
// of one KV-cache group says, in the offer (pushwire.Staging.Parts, key
// "staging_parts"), that it scatters progressive staged parts as they
// land: a prefill rank then sends each part's WRITE with the notification
// PUSH_STAGED_PART naming the image blocks [from, to) it wrote (every
// region), and decode copies those blocks of the slot into its blocks at
// once, on the poller goroutine, as it scatters a chunk. The rank's final
// chunks (PUSH_STAGED_CHUNK, PUSH_STAGED) then scatter only the blocks no
// part scattered, so after prefill's end only the last part is gathered,
// written and scattered. A part is no completion: the rank is counted
// once its chunks are scattered, exactly as before.
//
// The slot and the blocks are the request's while the rank is expected
// (its result cannot go out before the rank is counted, settled or timed
// out), which is when a part scatters; a part of a request decode no
// longer holds, of another registration of the id, or for a request that
// failed and only drains, scatters nothing (staged_parts_dropped). A part
// whose blocks lie outside the image or were scattered already changes
// nothing (staged_parts_rejected). Parts are in-order and disjoint from a
// gonixl prefill; decode does not rely on it.

// onStagedPart handles "PUSH_STAGED_PART:<from>:<to>:<id>:<n>".
func (c *Consumer) onStagedPart(sender string, msg []byte) {
	pt, err := pushwire.DecodeStagedPart(msg)
	if err != nil {
		c.stats.MalformedNotifications.Inc()
		c.log.Debug("pushconn: dropped a malformed PUSH_STAGED_PART", zap.String("sender", sender), zap.Error(err))
		return
	}
	c.mu.Lock()
	r, bc, err := c.partScatter(sender, pt)
	c.mu.Unlock()
	switch {
	case errors.Is(err, errPartDropped):
		c.push.stagedPartsDropped.Inc()
		c.log.Debug("pushconn: dropped a staged part of no request held", zap.String("sender", sender), zap.String("request", pt.ID))
		return
	case err != nil:
		c.push.stagedPartsRejected.Inc()
		c.log.Warn("pushconn: rejected a staged part", zap.String("sender", sender), zap.String("request", pt.ID), zap.Error(err))
		return
	}
	err = c.stage.CopyBlocks(c.cfg.Staging.Copier, bc)
	c.mu.Lock()
	if err != nil {
		// The request fails with the sender still expected: unlike a
		// chunk's, a part's rank has its final WRITE still to come, into
		// the slot, so the request drains (PUSH_CANCEL) until the rank
		// answers, and the slot is not given to another request meanwhile.
		if c.tracker.reqs[pt.ID] == r {
			c.tracker.end(c.now(), r, fmt.Errorf("%w: request %q: part of blocks [%d, %d) from prefill agent %q: %v", errStaging, pt.ID, pt.From, pt.To, sender, err))
		}
		c.mu.Unlock()
		c.log.Warn("pushconn: staged part could not be scattered", zap.String("request", pt.ID), zap.String("sender", sender), zap.Error(err))
		c.signal()
		return
	}
	// Remembered only if r is still the live request of the id: one
	// that ended while the part was copied takes no chunk scatter.
	if c.tracker.reqs[pt.ID] == r && r.stage != nil {
		done := r.stage.scattered[sender]
		for j := pt.From; j < pt.To; j++ {
			done[j] = true
		}
	}
	c.mu.Unlock()
	c.push.stagedParts.Inc()
}

// errPartDropped is partScatter's answer for a part of no request held.
var errPartDropped = errors.New("no request holds the part")

// partScatter returns the request that part pt from prefill agent sender
// is of and the part's scatter (c.mu held): errPartDropped when no live
// request expects the sender in a slot (or pt answers another
// registration of the id), another error when pt does not fit the
// request. What the request holds stays as it was.
func (c *Consumer) partScatter(sender string, pt pushwire.StagedPart) (*decodeReq, staging.BlockCopy, error) {
	r, _ := c.tracker.stagedPart(pt.ID, sender, pt.Seq)
	if r == nil || c.tracker.reqs[pt.ID] != r {
		// Unknown, released, another registration, or failed and only
		// draining: its blocks take nothing more.
		return nil, staging.BlockCopy{}, errPartDropped
	}
	part, ok := r.stage.parts[sender]
	if !ok {
		return nil, staging.BlockCopy{}, errPartDropped
	}
	if len(part.scatter) != 1 {
		return nil, staging.BlockCopy{}, fmt.Errorf("request %q: the image of several KV-cache groups takes no parts", pt.ID)
	}
	bc := part.scatter[0].BlockCopy
	if pt.To > len(bc.Blocks) {
		return nil, staging.BlockCopy{}, fmt.Errorf("request %q: part of blocks [%d, %d) outside the image's %d", pt.ID, pt.From, pt.To, len(bc.Blocks))
	}
	done := r.stage.scattered[sender]
	for j := pt.From; j < pt.To && done != nil; j++ {
		if done[j] {
			return nil, staging.BlockCopy{}, fmt.Errorf("request %q: part of blocks [%d, %d): block %d scattered already", pt.ID, pt.From, pt.To, j)
		}
	}
	if done == nil {
		// No block scattered yet: none marked is the same state.
		if r.stage.scattered == nil {
			r.stage.scattered = map[string][]bool{}
		}
		r.stage.scattered[sender] = make([]bool, len(bc.Blocks))
	}
	return r, bc.BlockRange(pt.From, pt.To), nil
}

// unscattered returns the copies of a chunk's scatter cut to the blocks no
// part scattered (done nil: all of them).
func unscattered(copies []staging.BlockCopy, done []bool) []staging.BlockCopy {
	if done == nil {
		return copies
	}
	var out []staging.BlockCopy
	for _, bc := range copies {
		for j := 0; j < len(bc.Blocks); {
			if j < len(done) && done[j] {
				j++
				continue
			}
			e := j + 1
			for e < len(bc.Blocks) && (e >= len(done) || !done[e]) {
				e++
			}
			out = append(out, bc.BlockRange(j, e))
			j = e
		}
	}
	return out
}
