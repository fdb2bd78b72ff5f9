package poller

import (
	"syscall"
	"time"
)

// sleep blocks the calling thread for about d with nanosleep(2), bypassing
// the Go timers' millisecond granularity (see timerFloor). An interrupted
// sleep returns early; nap's loop sleeps again.
func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
