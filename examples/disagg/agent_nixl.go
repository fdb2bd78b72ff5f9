//go:build nixl

package main

import (
	"fmt"
	"os"

	"github.com/gonixl/gonixl/nixl"
)

// agentFactory returns a factory of NIXL agents with the UCX backend over
// shared memory (every agent lives in this process), progressed by the
// connectors' pollers.
func agentFactory() (func(name string) (nixl.Agent, error), string) {
	if _, set := os.LookupEnv("UCX_NET_DEVICES"); !set {
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
	run := os.Getpid()
	return func(name string) (nixl.Agent, error) {
		a, err := nixl.New(fmt.Sprintf("disagg-%d-%s", run, name), nixl.Config{})
		if err != nil {
			return nil, err
		}
		if err := a.CreateBackend("UCX", map[string]string{"ucx_error_handling_mode": "none"}); err != nil {
			a.Close()
			return nil, fmt.Errorf("create UCX backend for %s: %w", name, err)
		}
		return a, nil
	}, "NIXL (UCX)"
}
