//go:build !linux

package poller

import "time"

// sleep waits about d. Only Linux has the kernel sleep nap uses; elsewhere
// it is a Go sleep, whatever the timers' granularity there.
func sleep(d time.Duration) { time.Sleep(d) }
