package stats

import "github.com/gonixl/gonixl/internal/latency"

// CounterValue is one connector-specific counter's value in a Snapshot.
type CounterValue struct {
	Name  string
	Help  string
	Value uint64
}

// Snapshot is a copy of a Set at one moment: package connector's Stats
// (whose fields are documented there, for users), which connector makes
// of it field by field.
type Snapshot struct {
	Transfers, Bytes, Descriptors                            uint64
	FailedTransfers, FailedNotifications, FailedHandshakes   uint64
	ExpiredRequests, UnknownNotifications, LateNotifications uint64
	MalformedNotifications, MalformedFrames                  uint64
	XferTime, PostTime                                       latency.Stats
	XferTimeHist, PostTimeHist, BytesHist, DescriptorsHist   HistogramSnapshot
	Extra                                                    []CounterValue
	// PrefixHitBlocks is a decode rank's prefix-hit blocks per KV-cache
	// group (Set.SetGroups), nil where none were registered.
	PrefixHitBlocks []GroupValue
}

// Get returns the value of the extra counter name, and whether it exists.
func (s Snapshot) Get(name string) (uint64, bool) {
	for _, c := range s.Extra {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}
