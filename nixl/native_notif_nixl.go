//go:build nixl

package nixl

import "fmt"

// GetNotifs returns and removes every notification received so far, by
// sender, in one call into NIXL (nixlAgent::getNotifs); nil when there are
// none. opts.Backends limits it to those backends. Without a progress
// thread it also progresses the agent, so call it (or XferStatus) regularly
// on every agent, including ones that only receive.
//
// If one backend fails, NIXL still returns what the others delivered: the
// result may then hold notifications and an error.
func (a *NativeAgent) GetNotifs(opts *Options) (Notifs, error) {
	return a.getNotifs("nixlAgent::getNotifs", nil, opts)
}

// AppendNotifs is GetNotifs adding to dst, as nixlAgent::getNotifs adds to
// the map it is given, and returning dst (a new map when dst is nil and
// something arrived). A poller that reuses one map, truncating its lists
// (n[k] = n[k][:0]) rather than deleting them, receives notifications
// without allocating a map per call. The messages never alias each other or
// earlier results.
func (a *NativeAgent) AppendNotifs(dst Notifs, opts *Options) (Notifs, error) {
	return a.getNotifs("nixlAgent::getNotifs", dst, opts)
}

func (a *NativeAgent) getNotifs(op string, dst Notifs, opts *Options) (Notifs, error) {
	if err := a.enter(op); err != nil {
		return dst, err
	}
	defer a.exit()
	o, err := a.options(op, opts)
	if err != nil {
		return dst, err
	}
	// One poller at a time per agent (NIXL serialises getNotifs anyway): the
	// scratch buffer and name cache are shared. Under SyncNone enter has
	// serialised the call already.
	if !a.serial {
		a.notifMu.Lock()
		defer a.notifMu.Unlock()
	}
	var b []byte
	var s Status
	if o == nil {
		// The common case, no options, skips building nixl_opt_args_t.
		b, s = shimPoll(a.agent, nil, nil, true, &a.scratch)
	} else {
		b, s = shimGetNotifs(a.agent, o, &a.scratch)
	}
	n, derr := appendNotifs(dst, b, a.internName)
	if derr != nil {
		return n, malformed(op, derr)
	}
	return n, check(op, s, func() string { return fmt.Sprintf("agent %q", a.name) })
}

// GenNotif sends msg to a peer as a notification with no transfer
// (nixlAgent::genNotif); the peer's metadata must be loaded. opts.Backends
// picks the backend.
func (a *NativeAgent) GenNotif(remote string, msg []byte, opts *Options) error {
	const op = "nixlAgent::genNotif"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	if remote == "" {
		return &Error{Op: op, Status: StatusInvalidParam, Msg: "remote agent name is empty"}
	}
	o, err := a.options(op, opts)
	if err != nil {
		return err
	}
	return check(op, shimGenNotif(a.agent, remote, msg, o), func() string { return fmt.Sprintf("to remote agent %q (metadata loaded?)", remote) })
}

// maxInternedNames bounds the cache of sender names; past it names are
// allocated per call, which is only slower.
const maxInternedNames = 4096

// internName returns the cached string for a sender name. Called by one
// GetNotifs at a time.
func (a *NativeAgent) internName(b []byte) string {
	// Most deliveries come from the sender of the previous one.
	if string(b) == a.lastName {
		return a.lastName
	}
	s, ok := a.names[string(b)]
	if !ok {
		s = string(b)
		if len(a.names) < maxInternedNames {
			a.names[s] = s
		}
	}
	a.lastName = s
	return s
}
