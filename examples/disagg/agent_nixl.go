//go:build nixl

package main

import (
	"fmt"
	"os"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// agents returns the factory of one stack's agents: NIXL agents with the
// UCX backend (the link model does not apply), over loopback devices.
func agents(loopback.TransferModel) (func(name string) (nixl.Agent, error), func(), string, error) {
	if _, set := os.LookupEnv("UCX_NET_DEVICES"); !set {
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
	run := os.Getpid()
	newAgent := func(name string) (nixl.Agent, error) {
		a, err := nixl.New(fmt.Sprintf("disagg-%d-%s", run, name), nixl.Config{})
		if err != nil {
			return nil, err
		}
		if err := a.CreateBackend("UCX", map[string]string{"ucx_error_handling_mode": "none"}); err != nil {
			a.Close()
			return nil, fmt.Errorf("create UCX backend for %s: %w", name, err)
		}
		return a, nil
	}
	return newAgent, func() {}, "NIXL (UCX)", nil
}
