//go:build nixl

package stack

import (
	"fmt"
	"os"

	"github.com/gonixl/gonixl/nixl"
)

// NativeAgents returns a factory of NIXL agents with the UCX backend (over
// the loopback device unless UCX_NET_DEVICES says otherwise), named
// prefix-<pid>-<name> so that stacks of one process, and of several, never
// share an agent name.
func NativeAgents(prefix string) (func(name string) (nixl.Agent, error), error) {
	if _, set := os.LookupEnv("UCX_NET_DEVICES"); !set {
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
	pid := os.Getpid()
	return func(name string) (nixl.Agent, error) {
		a, err := nixl.New(fmt.Sprintf("%s-%d-%s", prefix, pid, name), nixl.Config{})
		if err != nil {
			return nil, err
		}
		// NIXL's default UCX parameters, as the reference engine and a
		// vLLM engine create theirs: the error handling modes must agree.
		if err := a.CreateBackend("UCX", nil); err != nil {
			a.Close()
			return nil, fmt.Errorf("create UCX backend for %s: %w", name, err)
		}
		return a, nil
	}, nil
}
