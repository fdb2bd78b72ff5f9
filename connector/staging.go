package connector

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/gpucopy"
	"github.com/gonixl/gonixl/nixl"
)

// Staging is a rank's staging memory and policy for fragmented requests
// (RankConfig.Staging). A request whose blocks are scattered over the KV
// cache needs one NIXL descriptor per block and layer; staged, it moves as a
// few large transfers between slots, with a gather on the sending rank and
// a scatter on the receiving one.
//
// Pull: prefill's RequestFinished takes a slot (when the image fits, a slot
// is free and the cost model or StagingOn says so), returns the Params at
// once with the slot (our own keys "remote_staging_slot" and
// "remote_staging_await", which a vLLM decode never sees) and gathers the
// request's blocks into it in the background, Chunks ranges of regions in
// order; decode asks prefill over the side channel which chunks are
// gathered, READs each into a slot of its own once it is, and scatters it
// into its blocks before it reports the request done. Grouped requests
// (RequestFinishedGroups) are gathered inside RequestFinished. A pull
// prefill engine of several TP ranks stages only with
// pullconn.Config.ParamsAfterAllRanks.
//
// Push: decode offers a slot in its registration; the prefill rank gathers
// into its own slot, WRITEs the slot's parts into decode's slot, and decode
// scatters them into its blocks before it reports the request done.
//
// The memory is the caller's (device memory for VRAM, host memory from
// nixl.AllocBuffer for DRAM): the connector registers it with its agent and
// deregisters it on Close. The ranks of one engine must have the same Mode,
// Slots and SlotBytes. The zero value stages nothing.
type Staging struct {
	// Mode is StagingOff (default), StagingOn or StagingAuto.
	Mode StagingMode
	// Mem, Base and DevID name the staging memory: Slots*SlotBytes bytes
	// from Base. Mem must be the KV layout's memory type.
	Mem   nixl.MemType
	Base  uint64
	DevID uint64
	// SlotBytes is the size of one slot, a positive multiple of 16; a
	// request larger than a slot moves by direct descriptors. Slots (at
	// most 1024) bounds how many requests are staged at once on this rank.
	SlotBytes uint64
	Slots     int
	// Copier gathers and scatters. Nil means a host copy for DRAM; VRAM
	// needs one (NewGPUCopier).
	Copier Copier
	// DescCost and CopyBandwidth (bytes/s) are the cost model's figures
	// for StagingAuto (defaults DefaultDescCost and, by memory type,
	// DefaultVRAMCopyBandwidth or DefaultDRAMCopyBandwidth): a request is
	// staged when its descriptors would cost more than its copies.
	DescCost      time.Duration
	CopyBandwidth float64
	// MeasureCopy, under StagingAuto, measures CopyBandwidth when the rank
	// starts (copies inside slot 0 with the Copier) instead of taking it
	// from the field or its default. DescCost is always configured: it
	// needs a peer to measure.
	MeasureCopy bool
	// TransferChunk, when not zero, cuts a staged transfer into
	// descriptors of at most this many bytes; zero moves a slot's run as
	// one descriptor.
	TransferChunk uint64
	// Chunks cuts a staged transfer into this many pieces, by regions, so
	// that the gather of one piece, the transfer of the one before and the
	// scatter of the one before that overlap: 0 means 2, 1 gathers
	// everything before the first byte moves; at most 64, and never more
	// than the layout's regions. A chunked staged pull READ needs the same
	// block geometry on both sides; others move as one chunk.
	Chunks int
}

// StagingMode says when a rank stages (Staging.Mode).
type StagingMode string

// Staging modes.
const (
	// StagingOff never stages: every request moves by direct descriptors.
	StagingOff StagingMode = ""
	// StagingOn stages every request that fits a slot when a slot is free
	// on both sides, whatever it costs.
	StagingOn StagingMode = "on"
	// StagingAuto stages a request when the cost model (Staging.DescCost,
	// Staging.CopyBandwidth) says staging is cheaper and slots are free.
	StagingAuto StagingMode = "auto"
)

// Defaults of the staging cost model.
const (
	// DefaultDescCost is the cost of one NIXL descriptor on the direct path
	// (measured on one H200 with UCX cuda_ipc: 5-8 µs per descriptor).
	DefaultDescCost = 6 * time.Microsecond
	// DefaultVRAMCopyBandwidth is the gather/scatter bandwidth on a GPU in
	// bytes per second (the GPU copier's kernel on one H200: about 2 TB/s).
	DefaultVRAMCopyBandwidth = 2e12
	// DefaultDRAMCopyBandwidth is the same for host memory (memcpy).
	DefaultDRAMCopyBandwidth = 5e9
)

// Seg is one copy of Len bytes from address Src to address Dst. It is a
// struct type literal rather than a defined type so that every Copier,
// yours and the GPUCopier, runs unchanged where the connectors copy.
type Seg = struct {
	Src, Dst, Len uint64
}

// Copier copies segments within one memory space: the gather into a slot
// and the scatter out of it. Copy returns once every byte has been copied,
// or with the error that stopped it; it must be safe for concurrent use
// (pull prefill gathers each request on a goroutine of its own, one chunk
// after the other). A failed copy fails the request with ErrStaging, never
// with wrong bytes.
type Copier interface {
	Copy(segs []Seg) error
}

// GPUCopier is the CUDA gather/scatter kernel's Copier for one GPU (build
// tag `cuda`; without it NewGPUCopier returns an error). It copies whole
// blocks with one kernel launch and keeps the rank's transfers progressing
// while it runs.
type GPUCopier struct {
	c *gpucopy.Copier
}

// NewGPUCopier returns the copier for GPU device. Close it after the ranks
// that use it.
func NewGPUCopier(device int) (*GPUCopier, error) {
	c, err := gpucopy.New(device)
	if err != nil {
		return nil, err
	}
	return &GPUCopier{c: c}, nil
}

// Copy copies every segment on the GPU and waits for the copy to end.
func (g *GPUCopier) Copy(segs []Seg) error { return g.c.Copy(segs) }

// Close frees the copier's GPU resources. It is idempotent.
func (g *GPUCopier) Close() error { return g.c.Close() }

// internal returns the staging configuration the connectors run on. The
// GPU copier is handed over as itself, so that the connectors use its
// block kernel and keep polling while it runs.
func (s Staging) internal() staging.Config {
	c := staging.Config{
		Mode: staging.Mode(s.Mode), Mem: s.Mem, Base: s.Base, DevID: s.DevID,
		SlotBytes: s.SlotBytes, Slots: s.Slots, DescCost: s.DescCost, CopyBandwidth: s.CopyBandwidth,
		MeasureCopy: s.MeasureCopy, TransferChunk: s.TransferChunk, Chunks: s.Chunks,
	}
	switch cp := s.Copier.(type) {
	case nil:
	case *GPUCopier:
		if cp != nil {
			c.Copier = cp.c
		}
	default:
		c.Copier = cp
	}
	return c
}

// prepare validates s for a rank whose layout is in mem (field names it as
// the user wrote it), fills its defaults and measures the copy bandwidth
// when asked to.
func (s Staging) prepare(field string, mem nixl.MemType) (staging.Config, error) {
	c := s.internal()
	c.WithDefaults()
	if err := c.Validate(field, mem); err != nil {
		return staging.Config{}, err
	}
	if err := staging.Prepare(&c); err != nil {
		return staging.Config{}, fmt.Errorf("%s: %v", field, err)
	}
	return c, nil
}
