// Package stagingtest is the staging copier the connectors' tests share: a
// host copier that records what it copied and fails the copy it is told
// to, so tests see how many gathers and scatters ran, of how many bytes,
// in what order against other events, and what a failed one does.
package stagingtest

import (
	"fmt"
	"sync"

	"github.com/gonixl/gonixl/internal/staging"
)

// Copier copies with staging.HostCopier and records each copy. The zero
// value records and never fails. It is safe for concurrent use.
type Copier struct {
	// Probe, when set, is called as each copy starts; Record returns its
	// values (for example a fabric's posted count, to see what a gather
	// came after).
	Probe func() uint64
	// FailAt makes copy number FailAt (counting from 1) fail without
	// copying; 0 fails none.
	FailAt int
	// FailEvery makes every FailEvery-th copy fail as well (campaigns);
	// 0 fails none.
	FailEvery int

	mu     sync.Mutex
	bytes  []uint64
	probes []uint64
}

var _ staging.Copier = (*Copier)(nil)

// Copy records the copy and copies segs, unless it is the one to fail.
func (c *Copier) Copy(segs []staging.Seg) error {
	var n uint64
	for _, s := range segs {
		n += s.Len
	}
	c.mu.Lock()
	c.bytes = append(c.bytes, n)
	if c.Probe != nil {
		c.probes = append(c.probes, c.Probe())
	}
	k := len(c.bytes)
	c.mu.Unlock()
	if k == c.FailAt || c.FailEvery > 0 && k%c.FailEvery == 0 {
		return fmt.Errorf("stagingtest: injected failure of copy %d", k)
	}
	return staging.HostCopier{}.Copy(segs)
}

// Record returns the bytes of every copy so far, in order, and Probe's
// values at their starts.
func (c *Copier) Record() (bytes, probes []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint64(nil), c.bytes...), append([]uint64(nil), c.probes...)
}

// Count returns how many copies ran (failed ones included).
func (c *Copier) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bytes)
}
