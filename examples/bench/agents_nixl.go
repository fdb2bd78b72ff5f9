//go:build nixl

package main

import (
	"fmt"
	"os"

	"github.com/gonixl/gonixl/nixl"
)

// nativeAgents makes NIXL agents with the UCX backend (over the loopback
// device unless UCX_NET_DEVICES says otherwise); the preset's link and post
// cost do not apply: the transfers are real.
func nativeAgents(run string) (func(name string) (nixl.Agent, error), error) {
	if _, set := os.LookupEnv("UCX_NET_DEVICES"); !set {
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
	return func(name string) (nixl.Agent, error) {
		a, err := nixl.New(fmt.Sprintf("bench-%d-%s-%s", os.Getpid(), run, name), nixl.Config{})
		if err != nil {
			return nil, err
		}
		if err := a.CreateBackend("UCX", map[string]string{"ucx_error_handling_mode": "none"}); err != nil {
			a.Close()
			return nil, fmt.Errorf("create UCX backend for %s: %w", name, err)
		}
		return a, nil
	}, nil
}
