package main

import (
	"fmt"
	"math/rand"
	"strings"
	"time"
)

// Step kinds of the schedule.
const (
	stepBurst      = "burst"      // 3 x the decode engine's batch at once
	stepSteady     = "steady"     // Poisson arrivals for a few seconds
	stepSlow       = "slow"       // slow-reading streams beside steady traffic
	stepDisconnect = "disconnect" // streams whose clients leave after the first chunk, beside steady traffic
	stepKill       = "kill"       // kill -9 of one part under traffic, restart at the same address, then strict traffic again
)

// step is one entry of the schedule: what runs, then how long the stack sits
// idle after it.
type step struct {
	Kind string
	Part string        // stepKill: which part
	For  time.Duration // stepSteady, stepSlow, stepDisconnect, stepKill: how long traffic runs
	Rate float64       // requests per second of the steady traffic
	Idle time.Duration // the gap after the step's idle point
	Seed int64         // the step's own draws (calls, arrivals)
}

func (s step) String() string {
	what := s.Kind
	if s.Kind == stepKill {
		what += " " + s.Part
	}
	if s.For > 0 {
		what += fmt.Sprintf(" %v at %.0f/s", s.For, s.Rate)
	}
	return what
}

// Idle timeouts in the stack that a gap must cross (internal/sidechannel:
// the pool drops connections idle for 15 s, the server closes them after
// 30 s; HTTP keep-alive connections idle as long).
const longestIdleTimeout = 30 * time.Second

// crossingGap is a gap past every idle timeout, with a margin for a busy
// machine.
const crossingGap = longestIdleTimeout + 5*time.Second

// shortSchedule is the CI preset: every kind of step once (each part
// killed once), one gap past every idle timeout, short gaps elsewhere.
func shortSchedule(seed int64) []step {
	rng := rand.New(rand.NewSource(seed))
	gap := func() time.Duration {
		return 500*time.Millisecond + time.Duration(rng.Int63n(int64(1500*time.Millisecond)))
	}
	s := []step{
		{Kind: stepBurst},
		{Kind: stepSteady, For: 3 * time.Second, Rate: 15},
		{Kind: stepSlow, For: 2 * time.Second, Rate: 10},
		{Kind: stepDisconnect, For: 2 * time.Second, Rate: 10},
		{Kind: stepBurst},
		{Kind: stepKill, Part: partDecode, For: 3 * time.Second, Rate: 15},
		{Kind: stepKill, Part: partPrefill, For: 3 * time.Second, Rate: 15},
		{Kind: stepKill, Part: partProxy, For: 3 * time.Second, Rate: 15},
		{Kind: stepBurst},
	}
	for i := range s {
		s[i].Seed = rng.Int63()
		s[i].Idle = gap()
	}
	s[4].Idle = crossingGap // after the second burst: the next steps find every pooled connection idle past its timeout
	return s
}

// longSchedule draws steps until the planned time reaches d: kinds by
// weight, kills of a random part, gaps mostly short and one in three up to
// 2 minutes; the first long gap comes after the second step, so that even
// a run of a few minutes crosses every idle timeout.
func longSchedule(seed int64, d time.Duration) []step {
	rng := rand.New(rand.NewSource(seed))
	var s []step
	var planned time.Duration
	for planned < d {
		st := step{Seed: rng.Int63()}
		switch w := rng.Intn(10); {
		case w < 3:
			st.Kind = stepBurst
		case w < 6:
			st.Kind, st.For, st.Rate = stepSteady, time.Duration(3+rng.Intn(28))*time.Second, float64(5+rng.Intn(26))
		case w < 7:
			st.Kind, st.For, st.Rate = stepSlow, time.Duration(2+rng.Intn(9))*time.Second, 10
		case w < 8:
			st.Kind, st.For, st.Rate = stepDisconnect, time.Duration(2+rng.Intn(9))*time.Second, 10
		default:
			st.Kind, st.Part, st.For, st.Rate = stepKill, parts[rng.Intn(len(parts))], time.Duration(3+rng.Intn(8))*time.Second, 15
		}
		if rng.Intn(3) == 0 || len(s) == 1 {
			st.Idle = time.Duration(rng.Int63n(int64(2*time.Minute-crossingGap))) + crossingGap
		} else {
			st.Idle = 500*time.Millisecond + time.Duration(rng.Int63n(int64(10*time.Second)))
		}
		s = append(s, st)
		planned += st.For + st.Idle + 5*time.Second // a burst, the drain and the idle point take a few seconds
	}
	return s
}

func describe(s []step) string {
	var b strings.Builder
	var idle, longest time.Duration
	kinds := map[string]int{}
	for _, st := range s {
		kinds[st.Kind]++
		idle += st.Idle
		longest = max(longest, st.Idle)
	}
	fmt.Fprintf(&b, "%d steps (%d bursts, %d steady, %d slow readers, %d disconnects, %d kills), idle %v in all, longest gap %v",
		len(s), kinds[stepBurst], kinds[stepSteady], kinds[stepSlow], kinds[stepDisconnect], kinds[stepKill], idle.Round(time.Second), longest.Round(time.Second))
	return b.String()
}
