package pushconn

import (
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/gpucopy"
)

// Staging is a rank's staging memory and policy (RankConfig.Staging): with
// it, a fragmented request is gathered into a contiguous slot on prefill,
// moved by one WRITE into a slot that decode offered in its PUSH_REG
// (our own key "staging", which a vLLM prefill ignores), and scattered
// into decode's blocks before decode counts the rank's completion
// ("PUSH_STAGED:<id>:<n>"). Each side chooses per request: prefill stages
// when decode offered a slot, a slot of its own is free and the cost model
// (or StagingOn) says so; otherwise it WRITEs into the blocks as before.
// The zero value stages nothing.
//
// Decode holds the offered slot from the registration until the request's
// Result is out, so slots bound how many requests are offered staging at
// once; prefill holds its slot from the gather until its WRITE ended.
type Staging = staging.Config

// StagingMode says when a rank stages (Staging.Mode).
type StagingMode = staging.Mode

// Staging modes.
const (
	StagingOff  = staging.ModeOff
	StagingOn   = staging.ModeOn
	StagingAuto = staging.ModeAuto
)

// Copier gathers and scatters staging slots (Staging.Copier); Seg is one
// copy.
type (
	Copier = staging.Copier
	Seg    = staging.Seg
)

// NewGPUCopier returns the CUDA gather/scatter kernel's copier for GPU
// device (build tag `cuda`; without it an error). Close it after the ranks
// that use it with CloseGPUCopier.
func NewGPUCopier(device int) (Copier, error) { return gpucopy.NewCopier(device) }

// CloseGPUCopier frees a copier from NewGPUCopier; other copiers are left
// alone.
func CloseGPUCopier(c Copier) error { return gpucopy.CloseCopier(c) }
