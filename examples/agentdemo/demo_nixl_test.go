//go:build nixl

package main

import (
	"os"
	"testing"
	"time"
)

func TestRunMovesTheBuffer(t *testing.T) {
	if _, set := os.LookupEnv("UCX_NET_DEVICES"); !set {
		t.Setenv("UCX_NET_DEVICES", "lo")
	}
	if err := run(1<<20, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
