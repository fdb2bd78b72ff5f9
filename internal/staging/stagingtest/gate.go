package stagingtest

import (
	"fmt"
	"sync"
	"time"

	"github.com/gonixl/gonixl/internal/staging"
)

// Gate is a host copier whose copies wait for the test's word: copy k
// (counting from 1) starts copying only once Allow let k copies through,
// or Open all of them, and fails instead of copying if Fail named it. A
// test holds a background gather between two chunks with it, and sees
// what the connector does meanwhile. A copy that waits longer than
// Timeout (default 10 s) fails. It is safe for concurrent use.
type Gate struct {
	Timeout time.Duration

	mu      sync.Mutex
	started int
	copied  int
	allowed int
	open    bool
	fail    map[int]bool
	change  chan struct{}
}

var (
	_ staging.Copier         = (*Gate)(nil)
	_ staging.ProgressCopier = (*Gate)(nil)
)

// Copy waits for its turn, then copies segs (or fails, if told to).
func (g *Gate) Copy(segs []staging.Seg) error { return g.CopyProgress(segs, nil) }

// CopyProgress is Copy calling progress (when set) every 100 µs while it
// waits, as the GPU copier calls it while its kernel runs.
func (g *Gate) CopyProgress(segs []staging.Seg, progress func()) error {
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	g.mu.Lock()
	g.started++
	k := g.started
	g.changedLocked()
	for !g.open && g.allowed < k {
		ch := g.changesLocked()
		g.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("stagingtest: copy %d not allowed within %v", k, timeout)
		}
		if progress != nil {
			progress()
			left = min(left, 100*time.Microsecond)
		}
		t := time.NewTimer(left)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		g.mu.Lock()
	}
	failing := g.fail[k]
	g.mu.Unlock()
	var err error
	if failing {
		err = fmt.Errorf("stagingtest: injected failure of copy %d", k)
	} else {
		err = staging.HostCopier{}.Copy(segs)
	}
	g.mu.Lock()
	g.copied++
	g.changedLocked()
	g.mu.Unlock()
	return err
}

// CopyBlocksProgress copies the block copy's segments as CopyProgress.
func (g *Gate) CopyBlocksProgress(b staging.BlockCopy, progress func()) error {
	return g.CopyProgress(b.Segs(nil), progress)
}

// Allow lets n more copies through.
func (g *Gate) Allow(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allowed += n
	g.changedLocked()
}

// Open lets every copy through from now on.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
	g.changedLocked()
}

// Fail makes copy k (counting from 1) fail without copying once it is let
// through.
func (g *Gate) Fail(k int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail == nil {
		g.fail = map[int]bool{}
	}
	g.fail[k] = true
}

// Counts returns how many copies started (waiting ones included) and how
// many ended.
func (g *Gate) Counts() (started, ended int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started, g.copied
}

// WaitStarted waits up to d for n copies to have started, and reports
// whether they did.
func (g *Gate) WaitStarted(n int, d time.Duration) bool {
	return g.wait(d, func() bool { return g.started >= n })
}

// WaitEnded waits up to d for n copies to have ended, and reports whether
// they did.
func (g *Gate) WaitEnded(n int, d time.Duration) bool {
	return g.wait(d, func() bool { return g.copied >= n })
}

func (g *Gate) wait(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	g.mu.Lock()
	defer g.mu.Unlock()
	for !cond() {
		ch := g.changesLocked()
		g.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			g.mu.Lock()
			return cond()
		}
		t := time.NewTimer(left)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		g.mu.Lock()
	}
	return true
}

func (g *Gate) changesLocked() chan struct{} {
	if g.change == nil {
		g.change = make(chan struct{})
	}
	return g.change
}

func (g *Gate) changedLocked() {
	if g.change != nil {
		close(g.change)
		g.change = nil
	}
}

// Slow is a Copier whose copies each first sleep for Delay's answer (a
// campaign's gathers that take their time, so that decode waits for
// them). Delay must be safe for concurrent use.
type Slow struct {
	*Copier
	Delay func() time.Duration
}

// Copy sleeps, then copies as Copier does.
func (s Slow) Copy(segs []staging.Seg) error {
	if s.Delay != nil {
		time.Sleep(s.Delay())
	}
	return s.Copier.Copy(segs)
}
