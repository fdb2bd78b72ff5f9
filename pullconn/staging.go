package pullconn

import (
	"fmt"
	"sync"
	"time"

	"github.com/gonixl/gonixl/internal/staging"
)

// slotIndex is a pull engine's staging slot allocator: a request that is
// staged uses the same slot index on every prefill rank, so one key in
// the Params names all of them; the index is free again once every rank
// that took it has released it.
type slotIndex struct {
	mu    sync.Mutex
	shape staging.Info // Slots and SlotBytes every rank must have (Base unused)
	mode  staging.Mode
	// afterAll: the ranks' Config.ParamsAfterAllRanks.
	afterAll bool
	used     []int          // ranks holding each index
	owner    []string       // the request each index was last given to
	byID     map[string]int // request id -> index, while ranks still take it
	taken    map[string]int // request id -> ranks that took it
	ranks    int            // ranks with staging
	// change is closed (and replaced) when a background gather of some
	// rank moves on, waking the readiness queries waiting for it.
	change chan struct{}
	// fault, in tests, is asked before each readiness answer: lose drops
	// it (the asker gets a malformed reply), delay makes it late.
	fault func() (lose bool, delay time.Duration)
}

// answerFault returns the test fault of the next readiness answer.
func (s *slotIndex) answerFault() (bool, time.Duration) {
	s.mu.Lock()
	f := s.fault
	s.mu.Unlock()
	if f == nil {
		return false, 0
	}
	return f()
}

// changes returns a channel closed at the next change of some rank's
// gathers: take it before reading their states.
func (s *slotIndex) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.change == nil {
		s.change = make(chan struct{})
	}
	return s.change
}

// changed wakes the readiness queries waiting for a change.
func (s *slotIndex) changed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.change != nil {
		close(s.change)
		s.change = nil
	}
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
		return fmt.Errorf("Config.ParamsAfterAllRanks is %v; the engine's other ranks have %v", afterAll, s.afterAll)
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
