package pullconn

import (
	"fmt"
	"sync"

	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/gpucopy"
)

// Staging is a rank's staging memory and policy (RankConfig.Staging).
//
// On prefill, RequestFinished gathers the request's blocks, whole, into a
// slot (when the image fits a slot, one is free and the cost model or
// StagingOn says so) before it returns, and the Params carry the slot (our
// own key "remote_staging_slot", which a vLLM decode ignores). The slot is
// held with the blocks and freed with them. A prefill engine of several
// TP ranks stages only with RankConfig.ParamsAfterAllRanks: otherwise
// one rank's Params could reach decode before another rank had gathered
// (its blocks, read directly, hold the KV from the end of the forward
// pass; its slot only from its gather). The ranks of an engine must have
// the same Mode, Slots and SlotBytes: the slot index is the engine's.
//
// On decode, a load whose Params name a slot READs the parts it needs of
// each prefill rank's slot into a slot of its own (a few large READs, or
// one span), scatters them into its blocks and only then reports the
// request done; with no slot free, or when the model prefers it, it READs
// from the blocks as before.
//
// The zero value stages nothing.
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

// slotIndex is a pull engine's staging slot allocator: a request that is
// staged uses the same slot index on every prefill rank, so one key in
// the Params names all of them; the index is free again once every rank
// that took it has released it.
type slotIndex struct {
	mu    sync.Mutex
	shape staging.Info // Slots and SlotBytes every rank must have (Base unused)
	mode  staging.Mode
	// afterAll: the ranks' RankConfig.ParamsAfterAllRanks.
	afterAll bool
	used     []int          // ranks holding each index
	owner    []string       // the request each index was last given to
	byID     map[string]int // request id -> index, while ranks still take it
	taken    map[string]int // request id -> ranks that took it
	ranks    int            // ranks with staging
}

// join checks that a rank's staging (and its ParamsAfterAllRanks) has
// the engine's shape.
func (s *slotIndex) join(c *staging.Config, afterAll bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ranks == 0 {
		s.shape, s.mode, s.afterAll = staging.Info{Slots: c.Slots, SlotBytes: c.SlotBytes}, c.Mode, afterAll
		s.used = make([]int, c.Slots)
		s.owner = make([]string, c.Slots)
		s.byID, s.taken = map[string]int{}, map[string]int{}
	} else if c.Slots != s.shape.Slots || c.SlotBytes != s.shape.SlotBytes || c.Mode != s.mode {
		return fmt.Errorf("RankConfig.Staging: %d slots of %d bytes, mode %q; the engine's other ranks have %d of %d, mode %q",
			c.Slots, c.SlotBytes, c.Mode, s.shape.Slots, s.shape.SlotBytes, s.mode)
	} else if afterAll != s.afterAll {
		return fmt.Errorf("RankConfig.ParamsAfterAllRanks is %v; the engine's other ranks have %v", afterAll, s.afterAll)
	}
	s.ranks++
	return nil
}

func (s *slotIndex) leave() {
	s.mu.Lock()
	s.ranks--
	s.mu.Unlock()
}

// decide returns request id's slot index for one more of the engine's tp
// ranks. The first rank to finish the request decides for all: it takes a
// free index when want (and one is free), else none; the later ranks get
// the same answer, so every rank's Params name the same slot or none.
func (s *slotIndex) decide(id string, tp int, want bool) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.byID[id]
	if ok && i >= 0 && s.owner[i] != id {
		// Stale: the ranks that took i for this id released it (a failed
		// gather, an expiry, a Close) and another request took it since;
		// gathering into it now would overwrite that request's hold.
		ok = false
		delete(s.taken, id)
	}
	if !ok {
		i = -1
		for k, n := range s.used {
			if want && n == 0 {
				i = k
				break
			}
		}
		s.byID[id] = i
		if i >= 0 {
			s.owner[i] = id
		}
	}
	if s.taken[id]++; s.taken[id] >= tp {
		// Every rank has decided: a later request of the same id decides again.
		delete(s.byID, id)
		delete(s.taken, id)
	}
	if i < 0 {
		return 0, false
	}
	s.used[i]++
	return i, true
}

// release gives back one rank's hold of index i.
func (s *slotIndex) release(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= 0 && i < len(s.used) && s.used[i] > 0 {
		s.used[i]--
	}
}

// inUse returns how many indexes some rank holds.
func (s *slotIndex) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, u := range s.used {
		if u > 0 {
			n++
		}
	}
	return n
}
