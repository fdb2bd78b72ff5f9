package critbench

import (
	"context"
	"testing"
	"time"
)

// TestHandoffDelaysPullLoads checks that a pull run's critical path
// includes the handoff: with 30 ms between prefill's answer and decode's
// Load, no request can be ready sooner.
func TestHandoffDelaysPullLoads(t *testing.T) {
	const handoff = 30 * time.Millisecond
	rep, err := Run(context.Background(), Config{Mode: Pull, Requests: 5, Rate: 0, Handoff: handoff})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Done != 5 {
		t.Fatalf("%d of 5 requests done: %v", rep.Done, rep.FirstError)
	}
	if rep.Critical.P50 < handoff {
		t.Fatalf("pull critical path p50 %v is shorter than the %v handoff", rep.Critical.P50, handoff)
	}
}

func TestNegativeHandoffRefused(t *testing.T) {
	_, err := Run(context.Background(), Config{Mode: Pull, Requests: 1, Handoff: -time.Millisecond})
	if err == nil {
		t.Fatal("Run accepted a negative handoff")
	}
}
