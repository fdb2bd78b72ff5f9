package pushconn

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/nixl"
)

// loadPeerMD loads a peer agent's metadata, replacing a dead instance of
// the same name (engine.LoadPeerMD), and returns the agent's name. name is
// what the payload says, empty from a vLLM peer, whose metadata carries
// the name only inside NIXL's blob: loading it names the agent.
func loadPeerMD(a nixl.Agent, name string, md []byte) (string, error) {
	got, err := engine.LoadPeerMD(a, name, md)
	switch {
	case err != nil:
		return "", err
	case name != "" && got != name:
		return "", fmt.Errorf("metadata is agent %q, payload says %q", got, name)
	}
	return got, nil
}

// peerGone reports whether err says a peer agent is unreachable or
// unknown, so its cached handshake must be dropped. NIXL's C API (the
// default binding) folds NIXL_ERR_REMOTE_DISCONNECT into NIXL_ERR_BACKEND,
// so a backend error counts too: dropping a handshake that was still good
// costs one handshake, and what follows (a probe of the peer, a new
// handshake) finds out whether the peer is really gone.
func peerGone(err error) bool {
	return errors.Is(err, nixl.ErrRemoteDisconnect) || errors.Is(err, nixl.ErrNotFound) || errors.Is(err, nixl.ErrBackend)
}
