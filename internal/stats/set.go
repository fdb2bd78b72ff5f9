package stats

import (
	"sync"
	"time"

	"github.com/gonixl/gonixl/internal/latency"
)

// window is the number of recent samples kept for the time percentiles.
const window = 4096

// Set is the statistics of one connector instance (one rank). The exported
// counters are those every connector keeps; Counter registers more.
type Set struct {
	Transfers              *Counter // successful transfers
	Bytes                  *Counter // bytes moved by successful transfers
	Descriptors            *Counter // descriptors posted by successful transfers
	FailedTransfers        *Counter // transfers that failed to post or in flight
	FailedNotifications    *Counter // notifications that could not be sent
	FailedHandshakes       *Counter // side-channel handshakes that failed or were refused
	ExpiredRequests        *Counter // requests whose blocks were released by lease expiry
	UnknownNotifications   *Counter // completions for requests never seen
	LateNotifications      *Counter // completions that arrived after the lease expired
	MalformedNotifications *Counter // notifications that did not decode
	MalformedFrames        *Counter // side-channel frames that did not decode

	xferTime *latency.Window
	postTime *latency.Window
	xferHist *Histogram
	postHist *Histogram
	byteHist *Histogram
	descHist *Histogram

	groups groupCounters // per KV-cache group (SetGroups)

	interval intervalTransfers // the metrics line's current interval

	mu     sync.Mutex
	byName map[string]*Counter
	order  []*Counter
	shared int // counters registered by New; the rest are Extra
}

// New returns a Set with every shared counter at zero.
func New() *Set {
	s := &Set{
		xferTime: latency.NewWindow(window),
		postTime: latency.NewWindow(window),
		xferHist: NewHistogram(XferTimeBounds),
		postHist: NewHistogram(PostTimeBounds),
		byteHist: NewHistogram(BytesBounds),
		descHist: NewHistogram(DescriptorBounds),
		byName:   map[string]*Counter{},
	}
	s.Transfers = s.Counter("transfers", "Successful KV-cache transfers.")
	s.Bytes = s.Counter("bytes_transferred", "Bytes moved by successful KV-cache transfers.")
	s.Descriptors = s.Counter("descriptors", "Descriptors posted by successful KV-cache transfers.")
	s.FailedTransfers = s.Counter("failed_transfers", "KV-cache transfers that failed to post or in flight.")
	s.FailedNotifications = s.Counter("failed_notifications", "Notifications that could not be sent.")
	s.FailedHandshakes = s.Counter("failed_handshakes", "Side-channel handshakes that failed or were refused.")
	s.ExpiredRequests = s.Counter("expired_requests", "Requests whose held KV blocks were released by lease expiry.")
	s.UnknownNotifications = s.Counter("unknown_notifications", "Notifications naming a request this rank does not know.")
	s.LateNotifications = s.Counter("late_notifications", "Completions that arrived after the request's lease expired.")
	s.MalformedNotifications = s.Counter("malformed_notifications", "Notifications that could not be decoded.")
	s.MalformedFrames = s.Counter("malformed_frames", "Side-channel frames that could not be decoded.")
	s.shared = len(s.order)
	return s
}

// Counter returns the counter with this name, registering it with help on
// first use. Connectors register their own counters once, at construction.
func (s *Set) Counter(name, help string) *Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.byName[name]; ok {
		return c
	}
	c := &Counter{name: name, help: help}
	s.byName[name] = c
	s.order = append(s.order, c)
	return c
}

// RecordPost records how long posting one transfer took (descriptor
// preparation and the post call).
func (s *Set) RecordPost(d time.Duration) {
	s.postTime.Add(d)
	s.postHist.ObserveDuration(d)
	s.interval.addPost(d)
}

// RecordTransfer records one successful transfer: its size, its number of
// descriptors and the time from post to completion.
func (s *Set) RecordTransfer(bytes uint64, descriptors int, d time.Duration) {
	s.Transfers.Inc()
	s.Bytes.Add(bytes)
	s.Descriptors.Add(uint64(descriptors))
	s.xferTime.Add(d)
	s.xferHist.ObserveDuration(d)
	s.byteHist.Observe(float64(bytes))
	s.descHist.Observe(float64(descriptors))
	s.interval.addTransfer(bytes, descriptors, d)
}

// Snapshot returns a copy of every counter and time digest.
func (s *Set) Snapshot() Snapshot {
	snap := Snapshot{
		Transfers:              s.Transfers.Load(),
		Bytes:                  s.Bytes.Load(),
		Descriptors:            s.Descriptors.Load(),
		FailedTransfers:        s.FailedTransfers.Load(),
		FailedNotifications:    s.FailedNotifications.Load(),
		FailedHandshakes:       s.FailedHandshakes.Load(),
		ExpiredRequests:        s.ExpiredRequests.Load(),
		UnknownNotifications:   s.UnknownNotifications.Load(),
		LateNotifications:      s.LateNotifications.Load(),
		MalformedNotifications: s.MalformedNotifications.Load(),
		MalformedFrames:        s.MalformedFrames.Load(),
		XferTime:               s.xferTime.Stats(),
		PostTime:               s.postTime.Stats(),
		XferTimeHist:           s.xferHist.Snapshot(),
		PostTimeHist:           s.postHist.Snapshot(),
		BytesHist:              s.byteHist.Snapshot(),
		DescriptorsHist:        s.descHist.Snapshot(),
		PrefixHitBlocks:        s.prefixHits(),
	}
	s.mu.Lock()
	for _, c := range s.order[s.shared:] {
		snap.Extra = append(snap.Extra, CounterValue{Name: c.name, Help: c.help, Value: c.Load()})
	}
	s.mu.Unlock()
	return snap
}
