package engine

import (
	"errors"

	"github.com/gonixl/gonixl/nixl"
)

// LoadPeerMD loads a peer agent's metadata and returns the agent's name. A
// peer that restarted under the same name is refused by the agent
// (nixl.ErrNotAllowed) while the old instance is still known, so the old one
// is forgotten first and the load tried once more: transfers still bound to
// the dead instance fail, as they must. NIXL's C API (the default binding)
// folds that status into nixl.ErrBackend, so a backend error is handled the
// same way when the agent knew name: the invalidation succeeds only then.
func LoadPeerMD(a nixl.Agent, name string, md []byte) (string, error) {
	got, err := a.LoadRemoteMD(md)
	if errors.Is(err, nixl.ErrNotAllowed) || name != "" && errors.Is(err, nixl.ErrBackend) {
		if ierr := a.InvalidateRemoteMD(name); ierr == nil {
			got, err = a.LoadRemoteMD(md)
		}
	}
	return got, err
}
