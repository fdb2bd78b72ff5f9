//go:build !nixl

package main

import (
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// agents returns the factory of one stack's agents: loopback agents on one
// fabric (so every engine of the stack must live in this process), and what
// to close after the stack.
func agents(link loopback.TransferModel) (func(name string) (nixl.Agent, error), func(), string, error) {
	fab, err := loopback.NewFabric(loopback.WithModel(link))
	if err != nil {
		return nil, nil, "", err
	}
	newAgent := func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }
	return newAgent, func() { fab.Close() }, "loopback", nil
}
