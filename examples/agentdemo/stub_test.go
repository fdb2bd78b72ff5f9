//go:build !nixl

package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

func TestRunWithoutNIXLIsUnavailable(t *testing.T) {
	err := run(4096, time.Second)
	if !errors.Is(err, nixl.ErrUnavailable) {
		t.Fatalf("run: %v, want an error matching nixl.ErrUnavailable", err)
	}
}

// TestMainExitsWithStatus2 runs the command itself without the tag.
func TestMainExitsWithStatus2(t *testing.T) {
	if os.Getenv("AGENTDEMO_CHILD") == "1" {
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainExitsWithStatus2$")
	cmd.Env = append(os.Environ(), "AGENTDEMO_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "-tags nixl") {
		t.Fatalf("output does not say how to build with NIXL:\n%s", out)
	}
}
