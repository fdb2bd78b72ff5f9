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
	// capi: refuse as NIXL's C API does, which folds NIXL_ERR_NOT_ALLOWED
	// into NIXL_ERR_BACKEND (the binding over libnixl_capi).
	capi bool
}

func (a *mdAgent) LoadRemoteMD(md []byte) (string, error) {
	name, inst, _ := cutString(string(md))
	a.calls = append(a.calls, "load "+string(md))
	if old, ok := a.known[name]; ok && old != inst {
		if a.capi {
			return "", fmt.Errorf("nixl_capi_load_remote_md: %w", nixl.ErrBackend)
		}
		return "", fmt.Errorf("loadRemoteMD: %w: %q is loaded; invalidate the old metadata first", nixl.ErrNotAllowed, name)
	}
	a.known[name] = inst
	return name, nil
}

func (a *mdAgent) InvalidateRemoteMD(name string) error {
	a.calls = append(a.calls, "invalidate "+name)
	if _, ok := a.known[name]; !ok {
		return fmt.Errorf("invalidateRemoteMD: %w: %q", nixl.ErrNotFound, name)
	}
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

// Over NIXL's C API the refusal of a second instance reads as
// NIXL_ERR_BACKEND: the restarted peer is still replaced. A backend error
// for a peer the agent does not know is returned as it is, with no second
// load.
func TestLoadPeerMDReplacesARestartedPeerOverTheCAPI(t *testing.T) {
	for _, capi := range []bool{false, true} {
		t.Run(fmt.Sprintf("capi=%v", capi), func(t *testing.T) {
			a := &mdAgent{known: map[string]string{"prefill": "1"}, capi: capi}
			name, err := LoadPeerMD(a, "prefill", []byte("prefill/2"))
			require.NoError(t, err)
			require.Equal(t, "prefill", name)
			require.Equal(t, []string{"load prefill/2", "invalidate prefill", "load prefill/2"}, a.calls)
		})
	}
	a := &failingMD{err: fmt.Errorf("nixl_capi_load_remote_md: %w", nixl.ErrBackend)}
	_, err := LoadPeerMD(a, "decode", []byte("decode/1"))
	require.ErrorIs(t, err, nixl.ErrBackend)
	require.Equal(t, []string{"load", "invalidate decode"}, a.calls)
}

// failingMD refuses every load with err and knows no peer.
type failingMD struct {
	nixl.Agent
	err   error
	calls []string
}

func (a *failingMD) LoadRemoteMD([]byte) (string, error) {
	a.calls = append(a.calls, "load")
	return "", a.err
}

func (a *failingMD) InvalidateRemoteMD(name string) error {
	a.calls = append(a.calls, "invalidate "+name)
	return fmt.Errorf("invalidateRemoteMD: %w", nixl.ErrNotFound)
}
