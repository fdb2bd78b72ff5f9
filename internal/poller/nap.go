package poller

import (
	"runtime"
	"time"
)

// timerFloor is the shortest period the poller waits for with a Go timer.
// A Go timer waits in the runtime's network poller, which on Linux sleeps
// in whole milliseconds (epoll_wait): in a process with nothing else to
// run, a 20 µs timer, time.Sleep or time.After fires after about 1.08 ms
// (measured on the CPU machine and on the H100 machine, docs/gpu.md). A
// poller asked for a shorter period would poll at about 1 ms, and each hop
// of a transfer's end (the initiator seeing it done, which makes NIXL's
// UCX backend send the notification; the target seeing the notification)
// would wait up to a millisecond for it. Periods under this floor are
// waited out by nap instead.
const timerFloor = time.Millisecond

// spinBelow is the period under which nap does not sleep at all: the
// kernel's sleep wakes up to its timer slack (50 µs by default) late, so a
// shorter period can only be kept by yielding (runtime.Gosched) until it
// has passed, which keeps a CPU busy while the owner is busy.
const spinBelow = 50 * time.Microsecond

// nap waits about d (d below timerFloor) in the kernel's sleep, which
// wakes within the thread's timer slack rather than at the next
// millisecond, or, for d under spinBelow, by yielding; between sleeps or
// yields it checks whether the poller was stopped (it reports true) or
// woken. A sleeping poller holds its thread, not a CPU.
func (p *Poller) nap(d time.Duration) (stopped bool) {
	deadline := time.Now().Add(d)
	for {
		select {
		case <-p.done:
			return true
		case <-p.wake:
			return false
		default:
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		if d < spinBelow {
			runtime.Gosched()
			continue
		}
		sleep(min(left, napSlice))
	}
}

// napSlice bounds one sleep of nap, so that Wake and Stop are seen within
// it even in a long nap.
const napSlice = 200 * time.Microsecond
