package pushconn

import (
	"errors"

	"github.com/gonixl/gonixl/nixl"
)

// loadPeerMD loads a peer agent's metadata. A peer that restarted under the
// same name is refused by the agent (nixl.ErrNotAllowed) while the old
// instance is still known, so the old one is forgotten first and the load
// tried once more.
func loadPeerMD(a nixl.Agent, name string, md []byte) error {
	_, err := a.LoadRemoteMD(md)
	if errors.Is(err, nixl.ErrNotAllowed) {
		if ierr := a.InvalidateRemoteMD(name); ierr == nil {
			_, err = a.LoadRemoteMD(md)
		}
	}
	return err
}

// peerGone reports whether err says a peer agent is unreachable or
// unknown, so its cached handshake must be dropped.
func peerGone(err error) bool {
	return errors.Is(err, nixl.ErrRemoteDisconnect) || errors.Is(err, nixl.ErrNotFound)
}
