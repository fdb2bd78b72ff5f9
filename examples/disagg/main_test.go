package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunBothModes(t *testing.T) {
	if err := run(20, 2000, time.Millisecond, time.Millisecond, "modeled", true); err != nil {
		t.Fatal(err)
	}
	if err := run(1, 0, 0, 0, "warp", false); err == nil || err.Error() != `-link is "warp", want "instant" or "modeled"` {
		t.Fatalf("bad -link accepted: %v", err)
	}
}
