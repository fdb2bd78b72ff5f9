//go:build nixl

package main

import (
	"github.com/gonixl/gonixl/examples/stack"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// agents returns the factory of one stack's agents: NIXL agents with the
// UCX backend (the link model does not apply), over loopback devices.
func agents(loopback.TransferModel) (func(name string) (nixl.Agent, error), func(), string, error) {
	newAgent, err := stack.NativeAgents("disagg")
	if err != nil {
		return nil, nil, "", err
	}
	return newAgent, func() {}, "NIXL (UCX)", nil
}
