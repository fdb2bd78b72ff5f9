package stats

import "sync/atomic"

// Counter is a monotonically increasing count with a name and a help text.
// It is safe for concurrent use.
type Counter struct {
	name string
	help string
	v    atomic.Uint64
}

// Inc adds one.
func (c *Counter) Inc() { c.v.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Load returns the current count.
func (c *Counter) Load() uint64 { return c.v.Load() }

// Name returns the counter's snake_case name, such as "failed_transfers".
func (c *Counter) Name() string { return c.name }

// Help returns the one-line description of what is counted.
func (c *Counter) Help() string { return c.help }
