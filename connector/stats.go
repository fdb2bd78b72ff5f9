package connector

import (
	"time"

	"github.com/gonixl/gonixl/internal/stats"
)

// Stats is what a rank or an Engine reports about its transfers at one
// moment, as Stats methods return it and promstats exports it to
// Prometheus. Time digests cover successful transfers (XferTime) and every
// post (PostTime); their percentiles cover the most recent samples.
//
// The rank that posts the transfers (pull's decode, push's prefill) counts
// them, their bytes and descriptors, and the failed ones; ranks count the
// handshakes that failed, the notifications they could not send and those
// they received for unknown requests, late or malformed; ExpiredRequests
// counts holds released at their lease on prefill, and loads failed with
// pullconn.ErrExpired on pull's decode; an Engine counts malformed
// side-channel frames and refused handshakes. What only one connector
// counts is in Extra (docs/metrics.md lists every counter).
type Stats struct {
	Transfers              uint64
	Bytes                  uint64
	Descriptors            uint64
	FailedTransfers        uint64
	FailedNotifications    uint64
	FailedHandshakes       uint64
	ExpiredRequests        uint64
	UnknownNotifications   uint64
	LateNotifications      uint64
	MalformedNotifications uint64
	MalformedFrames        uint64
	XferTime               Timing
	PostTime               Timing
	// Histograms of the same samples over fixed buckets (vLLM's), for
	// Prometheus: transfer and post time in seconds, bytes and descriptors
	// per successful transfer.
	XferTimeHist    Histogram
	PostTimeHist    Histogram
	BytesHist       Histogram
	DescriptorsHist Histogram
	// Extra holds the counters only one connector keeps, in the order it
	// registered them.
	Extra []Counter
	// PrefixHitBlocks counts, on a decode rank, per KV-cache group of its
	// layout (Layout.GroupList order, one entry per group), the logical
	// blocks that its grouped calls' lists left out because the rank
	// already held them: a prefix-cache hit, which may differ from group
	// to group (descriptors.PrefixHits says how each kind counts; SSM
	// state is never a hit). pullconn counts each LoadGroups it accepts,
	// from Params.NumTokens; pushconn each RegisterGroups it accepts that
	// gives the request's length (Request.Tokens). nil on prefill ranks and
	// Engines. promstats exports it as nixl_prefix_hit_blocks_total with
	// group and kind labels.
	PrefixHitBlocks []GroupCount
}

// GroupCount is one KV-cache group's value of a per-group counter.
type GroupCount struct {
	// Group is the group's index in the rank's Layout.GroupList.
	Group int
	// Kind is the group's kind: "full", "sliding_window", "mla" or "ssm".
	Kind  string
	Value uint64
}

// Timing digests a duration series: Count and Sum cover every sample, the
// percentiles the most recent ones (a bounded window).
type Timing struct {
	Count uint64
	Sum   time.Duration
	Mean  time.Duration
	P50   time.Duration
	P90   time.Duration
	P99   time.Duration
}

// Histogram is a histogram at one moment: Cumulative[i] counts the
// observations <= Bounds[i]; Count and Sum cover all of them.
type Histogram struct {
	Bounds     []float64
	Cumulative []uint64
	Count      uint64
	Sum        float64
}

// Counter is one connector-specific counter's value in Stats.Extra.
type Counter struct {
	Name  string
	Help  string
	Value uint64
}

// Get returns the value of the extra counter name, and whether it exists.
func (s Stats) Get(name string) (uint64, bool) {
	for _, c := range s.Extra {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// statsOf copies an internal snapshot into the public type.
func statsOf(s stats.Snapshot) Stats {
	out := Stats{
		Transfers: s.Transfers, Bytes: s.Bytes, Descriptors: s.Descriptors,
		FailedTransfers: s.FailedTransfers, FailedNotifications: s.FailedNotifications,
		FailedHandshakes: s.FailedHandshakes, ExpiredRequests: s.ExpiredRequests,
		UnknownNotifications: s.UnknownNotifications, LateNotifications: s.LateNotifications,
		MalformedNotifications: s.MalformedNotifications, MalformedFrames: s.MalformedFrames,
		XferTime: Timing(s.XferTime), PostTime: Timing(s.PostTime),
		XferTimeHist: Histogram(s.XferTimeHist), PostTimeHist: Histogram(s.PostTimeHist),
		BytesHist: Histogram(s.BytesHist), DescriptorsHist: Histogram(s.DescriptorsHist),
	}
	if len(s.Extra) > 0 {
		out.Extra = make([]Counter, len(s.Extra))
		for i, c := range s.Extra {
			out.Extra[i] = Counter(c)
		}
	}
	if len(s.PrefixHitBlocks) > 0 {
		out.PrefixHitBlocks = make([]GroupCount, len(s.PrefixHitBlocks))
		for i, v := range s.PrefixHitBlocks {
			out.PrefixHitBlocks[i] = GroupCount{Group: i, Kind: v.Kind, Value: v.Value}
		}
	}
	return out
}
