package loadgen

import (
	"context"
	"fmt"
	"math/rand"
	"time"
)

// Arrivals describes when requests arrive.
type Arrivals struct {
	// Rate is the mean number of requests per second; 0 issues all at once.
	Rate float64
	// Poisson draws exponential inter-arrival times instead of fixed ones.
	Poisson bool
	// Seed seeds the Poisson draws, so runs are repeatable.
	Seed int64
}

// Offsets returns the arrival time of each of n requests, relative to the
// start.
func (a Arrivals) Offsets(n int) ([]time.Duration, error) {
	if a.Rate < 0 {
		return nil, fmt.Errorf("loadgen: rate must be >= 0, got %v", a.Rate)
	}
	out := make([]time.Duration, n)
	if a.Rate == 0 {
		return out, nil
	}
	rng := rand.New(rand.NewSource(a.Seed))
	mean := float64(time.Second) / a.Rate
	var at float64
	for i := range out {
		out[i] = time.Duration(at)
		if a.Poisson {
			at += rng.ExpFloat64() * mean
		} else {
			at += mean
		}
	}
	return out, nil
}

// Run calls issue(i) for i in [0, n) at the arrival times, on the calling
// goroutine, so issue must not block for long. It returns early with the
// context's error when ctx ends, having issued a prefix of the requests.
func Run(ctx context.Context, a Arrivals, n int, issue func(i int)) error {
	offsets, err := a.Offsets(n)
	if err != nil {
		return err
	}
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, off := range offsets {
		if wait := off - time.Since(start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		issue(i)
	}
	return nil
}
