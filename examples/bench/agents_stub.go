//go:build !nixl

package main

import (
	"fmt"

	"github.com/gonixl/gonixl/nixl"
)

// nativeAgents needs the nixl build tag.
func nativeAgents(string) (func(name string) (nixl.Agent, error), error) {
	return nil, fmt.Errorf("-agents nixl: bench was built without -tags nixl (NIXL agents need it and an installed NIXL)")
}
