//go:build !nixl

package stack

import (
	"fmt"

	"github.com/gonixl/gonixl/nixl"
)

// NativeAgents needs the nixl build tag (and an installed NIXL); without it
// it returns an error that says so.
func NativeAgents(string) (func(name string) (nixl.Agent, error), error) {
	return nil, fmt.Errorf("NIXL agents: this program was built without -tags nixl: %w", nixl.ErrUnavailable)
}
