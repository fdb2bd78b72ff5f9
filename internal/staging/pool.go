package staging

import (
	"fmt"
	"sync"
)

// Slot is one staging slot held by one owner.
type Slot struct {
	Index int
	Addr  uint64
	Len   uint64
}

// Pool hands out a rank's staging slots, each to one owner at a time. It
// is safe for concurrent use.
type Pool struct {
	mu    sync.Mutex
	base  uint64
	size  uint64
	owner []string // "" when free
	free  int
}

// NewPool returns a pool of n slots of size bytes from base.
func NewPool(base, size uint64, n int) *Pool {
	return &Pool{base: base, size: size, owner: make([]string, n), free: n}
}

// Acquire gives a free slot to owner (a request id, for messages), or
// reports false when every slot is taken.
func (p *Pool) Acquire(owner string) (Slot, bool) {
	if owner == "" {
		owner = "?"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == 0 {
		return Slot{}, false
	}
	for i, o := range p.owner {
		if o == "" {
			p.owner[i] = owner
			p.free--
			return Slot{Index: i, Addr: p.base + uint64(i)*p.size, Len: p.size}, true
		}
	}
	return Slot{}, false // not reached: free counts the empty owners
}

// Release makes s free again. Releasing a slot that is not held is an
// error and changes nothing (it would hand one slot to two owners).
func (p *Pool) Release(s Slot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.Index < 0 || s.Index >= len(p.owner) || p.owner[s.Index] == "" {
		return fmt.Errorf("staging: slot %d released but not held", s.Index)
	}
	p.owner[s.Index] = ""
	p.free++
	return nil
}

// InUse returns how many slots are held.
func (p *Pool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.owner) - p.free
}

// SlotBytes returns the size of one slot.
func (p *Pool) SlotBytes() uint64 { return p.size }
