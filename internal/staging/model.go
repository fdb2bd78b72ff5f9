package staging

import "time"

// Path is how a request moved.
type Path int

// Paths.
const (
	Direct Path = iota // one descriptor per fragment, from and into the blocks
	Staged             // gather, one large transfer, scatter
)

// String returns "direct" or "staged".
func (p Path) String() string {
	if p == Staged {
		return "staged"
	}
	return "direct"
}

// Model chooses a request's path. Direct costs a fixed DescCost per
// descriptor; staging costs two extra passes over the bytes (gather and
// scatter) at CopyBandwidth plus the staged transfer's own few
// descriptors. The transfer's bytes cross the link either way, so the link
// bandwidth cancels out.
type Model struct {
	Mode          Mode
	DescCost      time.Duration
	CopyBandwidth float64 // bytes per second
}

// NewModel returns the model of a configuration (after WithDefaults).
func NewModel(c *Config) Model {
	return Model{Mode: c.Mode, DescCost: c.DescCost, CopyBandwidth: c.CopyBandwidth}
}

// DirectCost is the modelled cost of moving by descs descriptors.
func (m Model) DirectCost(descs int) time.Duration {
	return time.Duration(descs) * m.DescCost
}

// StagedCost is the modelled cost of staging bytes and moving them by
// stagedDescs descriptors.
func (m Model) StagedCost(bytes uint64, stagedDescs int) time.Duration {
	if m.CopyBandwidth <= 0 {
		return time.Duration(1<<63 - 1)
	}
	copySec := 2 * float64(bytes) / m.CopyBandwidth
	return time.Duration(copySec*float64(time.Second)) + time.Duration(stagedDescs)*m.DescCost
}

// Choose returns the path for a request whose direct transfer takes
// descs descriptors for bytes bytes (a staged one takes stagedDescs):
// Staged under ModeOn, the cheaper under ModeAuto, else Direct.
func (m Model) Choose(descs int, bytes uint64, stagedDescs int) Path {
	switch m.Mode {
	case ModeOn:
		return Staged
	case ModeAuto:
		if m.StagedCost(bytes, stagedDescs) < m.DirectCost(descs) {
			return Staged
		}
	}
	return Direct
}
