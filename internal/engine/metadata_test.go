package engine

import (
	"fmt"
	"testing"

	"github.com/gonixl/gonixl/nixl"
	"github.com/stretchr/testify/require"
)

// mdAgent knows one instance per peer name, as NIXL does: a second one is
// refused until the first is invalidated.
type mdAgent struct {
	nixl.Agent // the methods not overridden are never called
	known      map[string]string
	calls      []string
}

func (a *mdAgent) LoadRemoteMD(md []byte) (string, error) {
	name, inst, _ := cutString(string(md))
	a.calls = append(a.calls, "load "+string(md))
	if old, ok := a.known[name]; ok && old != inst {
		return "", fmt.Errorf("loadRemoteMD: %w: %q is loaded; invalidate the old metadata first", nixl.ErrNotAllowed, name)
	}
	a.known[name] = inst
	return name, nil
}

func (a *mdAgent) InvalidateRemoteMD(name string) error {
	a.calls = append(a.calls, "invalidate "+name)
	delete(a.known, name)
	return nil
}

func cutString(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// A peer that restarted under its name replaces the dead instance's
// metadata; the first load of an unknown peer is one call.
func TestLoadPeerMDReplacesARestartedPeer(t *testing.T) {
	a := &mdAgent{known: map[string]string{}}
	name, err := LoadPeerMD(a, "prefill", []byte("prefill/1"))
	require.NoError(t, err)
	require.Equal(t, "prefill", name)
	require.Equal(t, []string{"load prefill/1"}, a.calls)

	a.calls = nil
	name, err = LoadPeerMD(a, "prefill", []byte("prefill/2"))
	require.NoError(t, err)
	require.Equal(t, "prefill", name)
	require.Equal(t, []string{"load prefill/2", "invalidate prefill", "load prefill/2"}, a.calls)
	require.Equal(t, "2", a.known["prefill"])
}
