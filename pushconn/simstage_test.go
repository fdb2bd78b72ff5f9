package pushconn

// Staging in the push simulation (sim_test.go): decode ranks offer staging
// slots, prefill ranks gather into theirs, and progressive parts go into
// decode's slot (stageprogress.go).
//
// What is REAL here, called as the connector calls it:
//   - decode: Consumer.offerStaging (a slot of the rank's real pool, the
//     scatter planned, staging_parts announced unless the rank is an
//     old decode: simStaging.oldDecode), Consumer.onStaged /
//     onStagedChunk (the chunk checks, the scatter through the copier of
//     the blocks no part scattered, the tracker's count),
//     Consumer.onStagedPart (the part's checks, its scatter through the
//     copier, what it marks scattered, a failed scatter failing the
//     request) and Consumer.releaseStage as the tracker publishes a
//     request, on a Consumer that holds the simulated rank's real tracker
//     and decode core;
//   - prefill: the shell's staging decisions and plans on a Producer that
//     holds the rank's real pool and cost model: writer.stagePart (staged,
//     direct, or put off for want of a slot), writer.stagedRest (the final
//     WRITE's chunks after staged parts, with or without a slot),
//     writer.stage (a whole WRITE staged by block ids), writer.offered,
//     stagedWrite.gather (through the copier), imageRun.lists and
//     staging.ChunkLists (the descriptors), writer.freeSlot, and the
//     staged completions' codecs.
//
// What is MODELED: the copier (a gather or scatter moves cell tags, a cell
// being one block of one region; it fails now and then, after a random
// prefix of its segments), and the agent's side of a staged WRITE
// (postStaged's loop: each chunk gathered, then posted; the WRITE's cells
// land one by one; each chunk's staged completion rides it, and a
// progressive part's WRITE carries PUSH_STAGED_PART, built with the real
// codec as writer.postStaged builds it, only to a decode whose offer said
// staging_parts). Part notifications go through the network as every
// notification does (kind simPart: lost, delayed, late copies), and only
// once the part's cells landed; a WRITE that fails sends none. A gather that
// fails after earlier chunks were posted lands a random part of them and
// is let go at once (writer.abandon's released case).
//
// The invariants are sim_test.go's, with the slots added: a done request's
// every block and region holds its bytes; nothing lands in a decode slot
// after the slot went back (its request published) nor in a prefill slot
// reused by another WRITE; every slot goes back exactly once (decode: at
// its request's publish, each tick the pool's count equals the slots the
// model knows held; prefill: each tick the pool's count equals the WRITEs
// in flight that hold one). A part scatter (simDecode.inPart) must write
// only blocks of the slot's request, not yet published, and copy only
// cells that hold that request's bytes (its part landed); a done request's
// blocks, scattered partly by parts and partly by the final chunks, hold
// its bytes (invariant 1 as before). No part reaches an old decode.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// simStaging is the staging of a simulation: slots per rank on either
// side (few, so that reports are put off and finals find none), and how
// often a copy fails.
type simStaging struct {
	preSlots, decSlots int
	copyFail           float64 // a gather or scatter fails
	partCopyFail       float64 // a part's scatter fails (the request drains behind PUSH_CANCEL)
	// oldDecode: bit r set makes decode rank r a decode that predates
	// PUSH_STAGED_PART (its offers leave out staging_parts).
	oldDecode uint
}

const (
	simSlotBase  = 1 << 32             // staging memory, on either side (each rank its own)
	simSlotBytes = 8 << 10 * simLayers // one image of simMaxReqBlocks blocks of a rank (or two half ones)
)

// simCells is one rank's memory as tags per cell (one block of one
// region): its KV regions (read through the engine's own tag arrays) and
// its staging slots.
type simCells struct {
	layout descriptors.Layout
	per    uint64
	slots  []int32 // per slot cell
}

func newSimCells(l descriptors.Layout, slots int) *simCells {
	return &simCells{layout: l, per: l.BlockLen(), slots: make([]int32, slots*simSlotBytes/int(l.BlockLen()))}
}

// where returns what address addr is: a slot cell (slot >= 0, cell its
// index in slots) or block b of region r.
func (m *simCells) where(addr uint64) (slot, cell, r, b int, err error) {
	if addr%m.per != 0 {
		return 0, 0, 0, 0, fmt.Errorf("model: address %#x is not at a cell (%d bytes)", addr, m.per)
	}
	if addr >= simSlotBase {
		c := int((addr - simSlotBase) / m.per)
		if c >= len(m.slots) {
			return 0, 0, 0, 0, fmt.Errorf("model: address %#x past the staging slots", addr)
		}
		return c * int(m.per) / simSlotBytes, c, 0, 0, nil
	}
	for r, reg := range m.layout.Regions {
		end := reg.Base + uint64(m.layout.NumBlocks)*m.per
		if addr >= reg.Base && addr < end {
			return -1, 0, r, int((addr - reg.Base) / m.per), nil
		}
	}
	return 0, 0, 0, 0, fmt.Errorf("model: address %#x is neither a block nor a slot", addr)
}

// cells splits a segment into cells: the count, after checking it is
// whole cells.
func (m *simCells) cells(n uint64) (int, error) {
	if n%m.per != 0 {
		return 0, fmt.Errorf("model: a copy or descriptor of %d bytes is not whole cells (%d bytes)", n, m.per)
	}
	return int(n / m.per), nil
}

// simCopier is a rank's copier over its cells: prefill gathers blocks into
// slots, decode scatters slots into blocks.
type simCopier struct {
	w    *simWorld
	pre  *simPrefill // one of the two
	dec  *simDecode
	mem  *simCells
	fail float64
	// partFail is decode's fail for a part scatter.
	partFail float64
}

var errSimCopy = errors.New("simulated: the staging copy failed")

func (c *simCopier) Copy(segs []staging.Seg) error {
	w := c.w
	failAt, fail := -1, c.fail
	if c.dec != nil && c.dec.inPart {
		fail = c.partFail
	}
	if w.rng.chance(fail) {
		failAt = w.rng.intn(len(segs) + 1)
	}
	for i, s := range segs {
		if i == failAt {
			c.failed()
			return errSimCopy
		}
		n, err := c.mem.cells(s.Len)
		if err != nil {
			w.fail("%v", err)
			return err
		}
		for k := range n {
			src, dst := s.Src+uint64(k)*c.mem.per, s.Dst+uint64(k)*c.mem.per
			if err := c.copyCell(src, dst); err != nil {
				w.fail("%v", err)
				return err
			}
		}
	}
	if failAt == len(segs) {
		c.failed()
		return errSimCopy
	}
	return nil
}

// failed counts a failed copy (and a failed part scatter apart).
func (c *simCopier) failed() {
	c.w.stats.copyFails++
	if c.dec != nil && c.dec.inPart {
		c.w.stats.partCopyFails++
	}
}

// copyCell copies one cell: on prefill a block into a slot, on decode a
// slot into a block of the request that owns the slot.
func (c *simCopier) copyCell(src, dst uint64) error {
	ss, sc, sr, sb, err := c.mem.where(src)
	if err != nil {
		return err
	}
	ds, dc, dr, db, err := c.mem.where(dst)
	if err != nil {
		return err
	}
	if c.pre != nil {
		if ss >= 0 || ds < 0 {
			return fmt.Errorf("model: prefill copies %#x -> %#x, not a block into a slot", src, dst)
		}
		c.mem.slots[dc] = c.pre.tag(sb, sr)
		return nil
	}
	if ss < 0 || ds >= 0 {
		return fmt.Errorf("model: decode copies %#x -> %#x, not a slot into a block", src, dst)
	}
	d := c.dec
	in := d.slotOwner[ss]
	if in == nil || d.owner[db] != in {
		// The scatter writes into blocks that are not the slot's request's.
		c.w.failID("", "invariant 2: decode rank %d scatters slot %d into block %d, which is not the slot's request's", d.rank, ss, db)
		return nil
	}
	if d.parts != 1 {
		return fmt.Errorf("model: a staged part at decode rank %d of %d parts", d.rank, d.parts)
	}
	tag := c.mem.slots[sc]
	if d.inPart {
		// A part scatter (onStagedPart): the part's cells landed before
		// its notification, so the slot holds the request's bytes there.
		if in.published {
			c.w.failID(in.req.id, "invariant 2: decode rank %d scatters a staged part into block %d of %q, published", d.rank, db, in.req.id)
			return nil
		}
		if tag != in.att.L {
			c.w.failID(in.req.id, "invariant 1: decode rank %d scatters a staged part of %q (logical %d) from slot %d cell %d, which holds bytes of logical request %d (0: poison)",
				d.rank, in.req.id, in.att.L, ss, sc, tag)
			return nil
		}
		c.w.stats.partCells++
	}
	d.content[d.cell(db, 0, dr)] = tag
	return nil
}

// ---- decode -------------------------------------------------------------------

// simDecodeStage is a decode rank's staging: a Consumer around the rank's
// real tracker and core (offerStaging, onStaged, releaseStage), its cells,
// and which request holds each slot.
type simDecodeStage struct {
	cons *Consumer
	mem  *simCells
}

type simClock struct{ w *simWorld }

func (c simClock) Now() time.Time { return c.w.decodeNow() }

func (d *simDecode) enableStaging(st *simStaging) {
	w := d.w
	mem := newSimCells(d.layout, st.decSlots)
	c := &Consumer{log: zap.NewNop(), stats: d.core.stats, push: d.core.push, tracker: d.tr, core: d.core,
		mono: func() time.Time { return time.Unix(0, simEpoch+w.now) }, ready: make(chan struct{}, 1),
		pool: staging.NewPool(simSlotBase, simSlotBytes, st.decSlots)}
	c.stage = staging.NewCounters(c.stats)
	c.cfg.Rank.Layout = d.layout
	c.cfg.Rank.Clock = simClock{w}
	c.cfg.Rank.Staging = staging.Config{Mode: staging.ModeOn, Base: simSlotBase, SlotBytes: simSlotBytes, Slots: st.decSlots,
		Copier: &simCopier{w: w, dec: d, mem: mem, fail: st.copyFail, partFail: st.partCopyFail}}
	c.noStagingParts = st.oldDecode&(1<<d.rank) != 0
	d.core.stage = c.stage
	d.st = &simDecodeStage{cons: c, mem: mem}
	d.slotOwner = make([]*simInst, st.decSlots)
	d.tr.onPublish = d.publishStaged
}

// offer is the edge's stagingOffer: the real Consumer's, the slot noted.
func (d *simDecode) offer(p *decodePeer, r *decodeReq) *pushwire.Staging {
	o := d.st.cons.offerStaging(p, r)
	if o == nil || r.stage == nil {
		return o
	}
	in, i := d.insts[r], r.stage.slot.Index
	switch {
	case in == nil:
		d.w.failID(r.id, "model: decode rank %d offered a slot for %q, which it does not know", d.rank, r.id)
	case d.slotOwner[i] == nil:
		d.slotOwner[i] = in
		d.w.stats.slotsOffered++
		d.w.note("decode offers staging slot (x: slot)", d.rank, r.id, r.seq, int64(i))
	case d.slotOwner[i] != in:
		d.w.failID(r.id, "invariant 4: decode rank %d offers slot %d to %q, held by %q", d.rank, i, r.id, d.slotOwner[i].req.id)
	}
	return o
}

// publishStaged is the tracker's onPublish with staging: the request's
// result and blocks (publish, which checks them), then the real
// releaseStage; the slot must be the request's, and is poisoned.
func (d *simDecode) publishStaged(r *decodeReq) {
	in := d.insts[r]
	var slot = -1
	if r.stage != nil {
		slot = r.stage.slot.Index
	}
	d.publish(r)
	d.st.cons.releaseStage(r)
	if slot < 0 || in == nil {
		return
	}
	if d.slotOwner[slot] != in {
		d.w.failID(r.id, "invariant 4: decode rank %d gives slot %d back for %q, which does not hold it (given back twice)", d.rank, slot, r.id)
		return
	}
	d.slotOwner[slot] = nil
	per := simSlotBytes / int(d.st.mem.per)
	clear(d.st.mem.slots[slot*per : (slot+1)*per])
}

// onStaged is the Consumer's poller dispatch of a staged completion; false:
// msg is none.
func (d *simDecode) onStaged(sender string, msg []byte) bool {
	switch {
	case d.st == nil:
		return false
	case strings.HasPrefix(string(msg), pushwire.StagedChunkPrefix):
		d.st.cons.onStagedChunk(sender, msg)
	case strings.HasPrefix(string(msg), pushwire.StagedPrefix):
		d.st.cons.onStaged(sender, msg)
	case strings.HasPrefix(string(msg), pushwire.StagedPartPrefix):
		if d.st.cons.noStagingParts {
			d.w.fail("model: decode rank %d, which offers no parts, got %q", d.rank, msg)
		}
		d.inPart = true
		d.st.cons.onStagedPart(sender, msg)
		d.inPart = false
	default:
		return false
	}
	return true
}

// checkSlots: the pool holds exactly the slots the model knows held, each
// by a request not yet published.
func (d *simDecode) checkSlots() {
	if d.st == nil {
		return
	}
	n := 0
	for i, in := range d.slotOwner {
		if in == nil {
			continue
		}
		n++
		if in.published {
			d.w.failID(in.req.id, "invariant 4: decode rank %d's slot %d is still held by %q, published", d.rank, i, in.req.id)
		}
	}
	if got := d.st.cons.pool.InUse(); got != n {
		d.w.fail("invariant 4: decode rank %d's pool has %d slots held, its requests hold %d", d.rank, got, n)
	}
}

// ---- prefill ------------------------------------------------------------------

// simPrefillStage is a prefill rank's staging: the shell (writer) on a
// Producer with the rank's real pool and cost model, and its cells; the
// WRITE gathered into each slot last.
type simPrefillStage struct {
	wr       *writer
	mem      *simCells
	gathered []*simWrite
}

func (p *simPrefill) enableStaging(st *simStaging) {
	w := p.w
	layout := simLayout(w.cfg.preTP, p.rank)
	mem := newSimCells(layout, st.preSlots)
	prod := &Producer{log: zap.NewNop(), push: p.core.push, world: w.cfg.preTP,
		pool: staging.NewPool(simSlotBase, simSlotBytes, st.preSlots), model: staging.Model{Mode: staging.ModeOn}}
	prod.stats = p.core.stats
	prod.stage = staging.NewCounters(prod.stats)
	prod.cfg.Rank.Layout = layout
	prod.cfg.Rank.Staging = staging.Config{Mode: staging.ModeOn, Base: simSlotBase, SlotBytes: simSlotBytes, Slots: st.preSlots,
		Copier: &simCopier{w: w, pre: p, mem: mem, fail: st.copyFail}}
	p.st = &simPrefillStage{wr: &writer{p: prod}, mem: mem, gathered: make([]*simWrite, st.preSlots)}
}

// decodeStagingInfo is what decode rank r's handshake payload says of its
// staging memory.
func (w *simWorld) decodeStagingInfo() *staging.Info {
	if w.cfg.staging == nil {
		return nil
	}
	return &staging.Info{Base: simSlotBase, SlotBytes: simSlotBytes, Slots: w.cfg.staging.decSlots}
}

// postPartStaged is writer.postPart's staging: the real stagePart decides;
// done false: the part goes direct (the caller posts it).
func (p *simPrefill) postPartStaged(pr *pendingReg, h *hold, in *simInst, srank int, dst []int, cached, from, to int) (postResult, bool) {
	w := p.w
	sw, use := p.st.wr.stagePart(pr, h, &pr.peer.payload.Ranks[pr.rank].Layout, dst, cached, from, to)
	switch {
	case !use:
		return postResult{}, false
	case sw == nil:
		w.stats.partsDeferred++
		w.note("prefill puts a staged part off: no slot (x: final blocks)", p.rank, pr.reg.RequestID, pr.reg.Seq, int64(to))
		return postResult{what: postNotify}, true
	}
	r := p.postStaged(pr, h, in, srank, sw)
	if r.wr != nil {
		r.wr.partial, r.wr.to = true, to
		pr.partInto = partStaged
		w.stats.progressWrites++
		w.stats.stagedParts++
	}
	return r, true
}

// postFinalStaged is writer.post's staging: after staged parts the real
// stagedRest; a whole WRITE of blocks one to one the real stage. done
// false: the WRITE goes direct (the caller posts it).
func (p *simPrefill) postFinalStaged(pr *pendingReg, h *hold, in *simInst, srank int, dst []int, cached int) (postResult, bool) {
	w := p.w
	dl := &pr.peer.payload.Ranks[pr.rank].Layout
	if pr.progress == h && pr.wroteAny(cached) {
		if pr.partInto != partStaged {
			return postResult{}, false // postRest
		}
		sw, err := p.st.wr.stagedRest(pr, h, dl, dst, cached)
		if err != nil {
			return postResult{what: postFailed, kind: pushwire.FailLayout, err: err}, true
		}
		w.stats.stagedRests++
		if sw.slot == nil {
			w.stats.restsNoSlot++
		}
		return p.postStaged(pr, h, in, srank, sw), true
	}
	pw := p.st.wr.p
	if pr.reg.Staging == nil || !staging.SameBlocks(&pw.cfg.Layout, dl) || len(h.blocks)-cached != len(dst) {
		return postResult{}, false
	}
	bytes := uint64(len(dst)) * uint64(len(dl.Regions)) * dl.BlockLen()
	sw := p.st.wr.stage(pr, h, nil, staging.SameBlocksDescs(dl, h.blocks[cached:], dst), bytes, dl, dst, cached)
	if sw == nil {
		return postResult{}, false
	}
	w.stats.stagedWholes++
	return p.postStaged(pr, h, in, srank, sw), true
}

// simMove is one cell a staged WRITE moves, of chunk chunk.
type simMove struct {
	src, dst uint64
	chunk    int
}

// postStaged is the agent's side of writer.postStaged for the WRITE the
// real shell planned: each chunk gathered (the real gather, through the
// copier) and posted, with its staged completion unless it is a part.
func (p *simPrefill) postStaged(pr *pendingReg, h *hold, in *simInst, srank int, sw *stagedWrite) postResult {
	w := p.w
	wr := &write{reg: pr, hold: h, deadline: p.now().mono.Add(time.Duration(simWriteTimeout)), slot: sw.slot}
	s := &simWrite{p: p, wr: wr, inst: in, srank: srank, id: pr.reg.RequestID, seq: pr.reg.Seq, posted: w.now, staged: true, chunkKind: simCompletion}
	if sw.slot != nil {
		p.st.gathered[sw.slot.Index] = s
	}
	n := len(sw.chunks)
	for k, ch := range sw.chunks {
		if err := sw.gather(p.st.wr.p, k, nil); err != nil {
			// The agent lets go of the chunks posted before at once; some
			// of their cells moved.
			for i := range s.moves {
				if w.rng.chance(0.5) {
					s.landCell(i)
				}
			}
			s.released = true
			p.st.wr.freeSlot(sw.slot)
			w.note("prefill: staged gather fails (x: chunk)", p.rank, s.id, s.seq, int64(k))
			return postResult{what: postFailed, kind: pushwire.FailTransfer, err: fmt.Errorf("gather chunk %d of %d: %w", k, n, err)}
		}
		var local, remote nixl.XferList
		if sw.run != nil {
			local, remote = sw.run.lists(sw.slot, ch.R0, ch.R1)
		} else {
			local, remote = staging.ChunkLists(sw.local, sw.remote, ch)
		}
		for i, ld := range local.Descs {
			rd := remote.Descs[i]
			cells, err := p.st.mem.cells(ld.Len)
			if err != nil || rd.Len != ld.Len {
				w.fail("model: staged descriptors %d: %+v -> %+v (%v)", i, ld, rd, err)
				return postResult{what: postFailed, err: errors.New("model")}
			}
			for c := range cells {
				off := uint64(c) * p.st.mem.per
				s.moves = append(s.moves, simMove{src: ld.Addr + off, dst: rd.Addr + off, chunk: k})
			}
		}
		var msg []byte
		var err error
		switch {
		case sw.part && !pr.reg.Staging.Parts:
			// A decode that takes no parts: the part's WRITE notifies
			// nobody.
			w.stats.partsSilent++
			continue
		case sw.part:
			msg, err = pushwire.EncodeStagedPart(pr.reg.RequestID, w.cfg.preTP, sw.run.j0, sw.run.j1, pr.reg.Seq)
			s.chunkKind = simPart
		case n == 1:
			msg, err = pushwire.EncodeStaged(pr.reg.RequestID, w.cfg.preTP, pr.reg.Seq)
		default:
			msg, err = pushwire.EncodeStagedChunk(pr.reg.RequestID, w.cfg.preTP, k, n, pr.reg.Seq)
		}
		if err != nil {
			w.fail("model: staged completion: %v", err)
		}
		s.chunkMsgs = append(s.chunkMsgs, msg)
	}
	if w.rng.chance(w.cfg.postFail) {
		w.stats.postFailed++
		s.released = true
		p.st.wr.freeSlot(sw.slot)
		return postResult{what: postFailed, kind: pushwire.FailPost, err: errors.New("simulated post failure")}
	}
	s.landed = make([]bool, len(s.moves))
	w.stats.posted++
	w.stats.stagedWrites++
	w.note("prefill posts staged WRITE (x: cells)", p.rank, s.id, s.seq, int64(len(s.moves)))
	if w.rng.chance(0.1) { // StatusSuccess at once
		w.stats.instant++
		for i := range s.landed {
			s.landAt(i)
		}
		s.status, s.released = 1, true
		s.sendChunks(len(s.chunkMsgs))
		return postResult{what: postCompleted, wr: wr}
	}
	s.plan()
	p.writes[wr] = s
	return postResult{what: postInFlight, wr: wr}
}

// sendChunks sends the staged completions of the first k chunks, each
// riding its chunk (every cell of which lands first).
func (sw *simWrite) sendChunks(k int) {
	for i, m := range sw.moves {
		if m.chunk < k {
			sw.landAt(i)
		}
	}
	for _, msg := range sw.chunkMsgs[:k] {
		if sw.chunkKind == simPart {
			sw.p.w.stats.partNotes++
		}
		sw.p.w.send(&simMsg{kind: sw.chunkKind, toDecode: true, from: sw.p.rank, to: sw.srank, b: msg, id: sw.id, seq: sw.seq})
	}
}

// landCell lands move i of a staged WRITE: the cell as prefill holds it
// now (a block, or its slot, which must still be this WRITE's) into
// decode's slot, which must still be the request's (invariant 2).
func (sw *simWrite) landCell(i int) {
	w, p := sw.p.w, sw.p
	mv := sw.moves[i]
	ss, sc, sr, sb, err := p.st.mem.where(mv.src)
	if err != nil {
		w.fail("%v", err)
		return
	}
	var tag int32
	if ss >= 0 {
		if p.st.gathered[ss] != sw {
			w.failID(sw.id, "invariant 2: a staged WRITE from prefill rank %d for %q (seq %d) moves cells of slot %d, which another WRITE gathered into since", p.rank, sw.id, sw.seq, ss)
			return
		}
		tag = p.st.mem.slots[sc]
	} else {
		tag = p.tag(sb, sr)
	}
	d := w.dec[sw.srank]
	ds, dc, _, _, err := d.st.mem.where(mv.dst)
	if err != nil || ds < 0 {
		w.fail("model: a staged WRITE lands at %#x, not in decode rank %d's slots (%v)", mv.dst, d.rank, err)
		return
	}
	in := sw.inst
	w.note("staged WRITE lands a cell (x: slot)", d.rank, in.req.id, in.req.seq, int64(ds))
	if d.slotOwner[ds] != in {
		w.violate(false, "staged WRITE after the slot went back", in.req.id, "invariant 2: a staged WRITE from prefill rank %d for %q (seq %d, logical %d) landed in decode rank %d's slot %d, which is no longer the request's (published: %v)",
			p.rank, in.req.id, in.req.seq, in.att.L, d.rank, ds, in.published)
		return
	}
	d.st.mem.slots[dc] = tag
}

// checkSlots: the pool holds exactly the slots of the WRITEs in flight.
func (p *simPrefill) checkSlots() {
	if p.st == nil || !p.up {
		return
	}
	n := 0
	for _, wr := range p.core.inflight {
		if wr.slot != nil {
			n++
		}
	}
	if got := p.st.wr.p.pool.InUse(); got != n {
		p.w.fail("invariant 4: prefill rank %d's pool has %d slots held, its WRITEs in flight %d", p.rank, got, n)
	}
}

// ---- the test ---------------------------------------------------------------

// simStagedConfigs are the all-faults configurations with progress and
// staging, slots short on both sides: at TP 1 -> 1 and 2 -> 2 parts go
// into decode's slot, at 2 -> 1 and 1 -> 2 (blocks not one to one) direct
// while decode still offers its slot.
func simStagedConfigs(seed uint64) []simConfig {
	var out []simConfig
	for i, cfg := range simConfigs() {
		cfg.progress, cfg.layerProgress = 0.6, 0.2 // per-layer tails: direct parts take them, staged ones wait
		cfg.staging = &simStaging{preSlots: 1 + int(seed+uint64(i))%3, decSlots: 2 + int(seed+uint64(i))%7, copyFail: 0.01, partCopyFail: 0.05}
		// Decode ranks that take no parts: none, rank 0, rank 1 (of two),
		// or every one, by turns.
		cfg.staging.oldDecode = uint(seed+uint64(i)) % 4 & (1<<cfg.decTP - 1)
		// Late copies of parts, often enough that some meet their request
		// still computing (rejected: scattered already) and some meet
		// another registration of the id or none (dropped).
		cfg.net.dup[simPart] = 0.3
		cfg.net.loss[simPart] = 0.05 // the final chunks then scatter the part's blocks
		cfg.name += fmt.Sprintf(", progressive staged (%d/%d slots, old decode ranks %b)", cfg.staging.preSlots, cfg.staging.decSlots, cfg.staging.oldDecode)
		out = append(out, cfg)
	}
	return out
}

// TestSimProgressiveStaged is TestSimProgressive with staging on every
// rank: progressive parts gathered into prefill's slots and written into
// decode's, put off when prefill has no slot free, the rest at finish as
// staged chunks (from the blocks when no slot is free), whole WRITEs
// staged, copies failing now and then, parts scattered by decode as their
// PUSH_STAGED_PART lands (lost, late copies dropped or rejected), some
// decode ranks taking no parts, and every invariant plus the slots'
// checked after every step. Same seed, same trace (the replay hash).
//
// GONIXL_SIM=long: 20 seeds x 200,000 steps per pairing.
func TestSimProgressiveStaged(t *testing.T) {
	seeds, steps := simSeeds(t, 1, 3), simShortSteps()
	if simLong() {
		seeds, steps = simSeeds(t, 1, 20), 200_000
	}
	var total simStats
	for _, seed := range seeds {
		for _, cfg := range simStagedConfigs(seed) {
			w := newSimWorld(cfg, currentRules, seed)
			w.run(steps)
			total.add(&w.stats)
			if w.violation != nil {
				t.Fatalf("seed %d, %s: %v%s", seed, cfg.name, w.violation, simHistory(cfg, currentRules, w.violation))
			}
		}
	}
	t.Logf("%d steps: %d requests, %d done, %d failed; %d reports (%d per layer), %d progressive WRITEs (%d staged parts, %d put off), %d staged rests (%d with no slot), %d whole WRITEs staged, %d staged WRITEs; %d slots offered by decode; %d copies failed; %d requests dropped between a report and the finish; "+
		"%d PUSH_STAGED_PART sent (%d lost, %d late copies), %d parts to a decode that takes none; decode: %d parts scattered (%d cells), %d dropped, %d rejected, %d part scatters failed (their copy)",
		total.steps, total.requests, total.done, total.failed, total.progressReports, total.layerReports, total.progressWrites, total.stagedParts, total.partsDeferred,
		total.stagedRests, total.restsNoSlot, total.stagedWholes, total.stagedWrites, total.slotsOffered, total.copyFails, total.progressAborts,
		total.partNotes, total.lost[simPart], total.dups[simPart], total.partsSilent, total.partScatters, total.partCells, total.partsDropped, total.partsRejected, total.partCopyFails)
	for _, c := range []struct {
		what string
		n    int
	}{
		{"staged parts", total.stagedParts}, {"parts put off", total.partsDeferred}, {"staged rests", total.stagedRests},
		{"rests with no slot", total.restsNoSlot}, {"whole WRITEs staged", total.stagedWholes}, {"failed copies", total.copyFails},
		{"requests dropped between a report and the finish", total.progressAborts}, {"done requests", total.done},
		{"per-layer reports", total.layerReports},
		{"decode aborts", total.decodeAborts},
		{"part notifications", total.partNotes}, {"parts to a decode that takes none", total.partsSilent},
		{"part scatters", total.partScatters}, {"cells scattered by parts", total.partCells},
		{"parts dropped", total.partsDropped}, {"parts rejected", total.partsRejected},
		{"failed part scatters", total.partCopyFails}, {"lost part notifications", total.lost[simPart]}, {"late copies of part notifications", total.dups[simPart]},
	} {
		require.Positive(t, c.n, "the simulation never went through %s", c.what)
	}
}

// TestSimProgressiveStagedReplay: one staged seed run eight times gives
// the same trace, event for event. Seed 5 at TP 2 -> 2 is the regression
// seed of progressed's pick (writeprogress.go): a registration that two
// progressing requests of its base id would pair with got the part of
// whichever map order gave first, so about every other run of this seed
// diverged (at step 2567, prefill rank 1 writing a part on the PUSH_REG of
// "req2-27ec2fff" or not); it now takes the one that reported first.
func TestSimProgressiveStagedReplay(t *testing.T) {
	cfg := simStagedConfigs(5)[3]
	n := simShortSteps()
	first := simRun(cfg, currentRules, 5, n)
	require.Positive(t, first.stats.stagedParts)
	require.Positive(t, first.stats.partScatters)
	require.Positive(t, first.stats.layerReports)
	for range 7 {
		again := simRun(cfg, currentRules, 5, n)
		require.Equal(t, first.hash, again.hash, "seed 5 ran again: the staged simulation is not deterministic")
		require.Equal(t, first.traceN, again.traceN)
	}
}
