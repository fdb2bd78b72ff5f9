package stats

import (
	"sync"
	"time"
)

// intervalTransfers collects the successful transfers and post times of the
// current logging interval, which the metrics line reports and then clears
// (vLLM's line covers one interval, not the time since start). It keeps
// exact counts and sums, and the most recent window samples of each time
// for the percentiles, so that a rank nobody logs for holds bounded memory.
type intervalTransfers struct {
	mu          sync.Mutex
	transfers   uint64
	bytes       uint64
	descriptors uint64
	xfer, post  intervalSamples
}

// intervalSamples is one interval's durations: count and sum of all, the
// most recent window of them kept.
type intervalSamples struct {
	kept  []time.Duration
	next  int // where the next sample goes once kept is full
	count uint64
	sum   time.Duration
}

func (r *intervalSamples) add(d time.Duration) {
	r.count++
	r.sum += d
	if len(r.kept) < window {
		r.kept = append(r.kept, d)
		return
	}
	r.kept[r.next] = d
	r.next = (r.next + 1) % window
}

func (iv *intervalTransfers) addTransfer(bytes uint64, descriptors int, d time.Duration) {
	iv.mu.Lock()
	iv.transfers++
	iv.bytes += bytes
	iv.descriptors += uint64(descriptors)
	iv.xfer.add(d)
	iv.mu.Unlock()
}

func (iv *intervalTransfers) addPost(d time.Duration) {
	iv.mu.Lock()
	iv.post.add(d)
	iv.mu.Unlock()
}

// intervalTransfersTaken is what take hands the metrics line.
type intervalTransfersTaken struct {
	transfers, bytes, descriptors uint64
	xfer, post                    intervalSamples
}

// take returns the interval's transfers and starts a new interval, unless
// the interval saw no transfer and force is false: then it returns false
// and keeps what it has (post times of transfers not yet completed), as
// vLLM keeps its stats until a line is logged.
func (iv *intervalTransfers) take(force bool) (intervalTransfersTaken, bool) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if iv.transfers == 0 && !force {
		return intervalTransfersTaken{}, false
	}
	out := intervalTransfersTaken{transfers: iv.transfers, bytes: iv.bytes, descriptors: iv.descriptors, xfer: iv.xfer, post: iv.post}
	iv.transfers, iv.bytes, iv.descriptors = 0, 0, 0
	iv.xfer, iv.post = intervalSamples{}, intervalSamples{}
	return out, true
}
