//go:build !nixl

package nixl

import "fmt"

// NativeAgent is the real NIXL agent. In this build (without the `nixl`
// build tag) it cannot be created: New returns ErrUnavailable.
type NativeAgent struct{}

// New would create a native NIXL agent; without the `nixl` build tag it
// returns an error matching ErrUnavailable that says how to get one.
func New(name string, cfg Config) (*NativeAgent, error) {
	return nil, fmt.Errorf("%w: rebuild with `-tags nixl` and NIXL installed in /opt/nvidia/nvda_nixl (or point CGO_CXXFLAGS/CGO_LDFLAGS at it); agent %q not created", ErrUnavailable, name)
}
