package pushconn

import (
	"errors"

	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/nixl"
)

// loadPeerMD loads a peer agent's metadata, replacing a dead instance of
// the same name (engine.LoadPeerMD).
func loadPeerMD(a nixl.Agent, name string, md []byte) error {
	_, err := engine.LoadPeerMD(a, name, md)
	return err
}

// peerGone reports whether err says a peer agent is unreachable or
// unknown, so its cached handshake must be dropped.
func peerGone(err error) bool {
	return errors.Is(err, nixl.ErrRemoteDisconnect) || errors.Is(err, nixl.ErrNotFound)
}
