package match

import (
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkMatch10kPending measures registrations matched per second while
// 10k finished requests and 10k registrations of other requests wait: each
// iteration registers for one waiting finished request (a stripped-id match,
// the slowest rule) and finishes a new one, so the pending counts stay at 10k.
func BenchmarkMatch10kPending(b *testing.B) {
	const pending = 10_000
	m, err := New[int, int](Config{})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, pending+b.N)
	decodeIDs := make([]string, pending+b.N)
	for i := range ids {
		ids[i] = "cmpl-" + strconv.Itoa(i) + "-0-" + "0badf00d"
		decodeIDs[i] = "cmpl-" + strconv.Itoa(i) + "-0-" + "DEADBEEF"
	}
	now := time.Unix(0, 0)
	for i := range pending {
		if _, err := m.Finish(now, Key{RequestID: ids[i]}, i); err != nil {
			b.Fatal(err)
		}
		if _, _, err := m.Register(now, "d0", Key{RequestID: "other-" + strconv.Itoa(i)}, 0, 1, i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Microsecond)
		_, out, err := m.Register(now, "d0", Key{RequestID: decodeIDs[i]}, 0, 1, i)
		if err != nil || out != Matched {
			b.Fatalf("registration %d: %v %v", i, out, err)
		}
		if _, err := m.Finish(now, Key{RequestID: ids[pending+i]}, i); err != nil {
			b.Fatal(err)
		}
		if i%1024 == 0 {
			m.Expire(now)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "matches/s")
	// The process's CPU time (all threads: the collector's too) says what
	// the matcher costs when other work on the machine stretches the wall
	// clock.
	b.ReportMetric(float64(b.N)/(cpuTime()-cpu).Seconds(), "matches/cpu-s")
	if s := m.Stats(); s.PendingFinished != pending || s.PendingRegistrations != pending {
		b.Fatalf("pending counts drifted: %+v", s)
	}
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
