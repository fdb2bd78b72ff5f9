//go:build !nixl

package main

import "github.com/gonixl/gonixl/nixl"

// agentFactory returns nil: the benchmark harness then uses loopback agents
// on one fabric.
func agentFactory() (func(name string) (nixl.Agent, error), string) {
	return nil, "loopback"
}
