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
	var o *shimOpts
	if opts != nil {
		var err error
		if o, err = a.options(op, opts); err != nil {
			return dst, err
		}
	}
	// One poller at a time per agent (NIXL serialises getNotifs anyway): the
	// scratch buffer and the decoder are shared. Under SyncNone enter has
	// serialised the call already.
	if !a.serial {
		a.notifMu.Lock()
		defer a.notifMu.Unlock()
	}
	var c cNotifs
	var s Status
	if o == nil {
		// The common case, no options, skips building nixl_opt_args_t.
		c, s = shimPoll(a.agent, nil, nil, true, &a.scratch)
	} else {
		c, s = shimGetNotifs(a.agent, o, &a.scratch)
	}
	return a.takeNotifs(op, dst, c, s)
}

// takeNotifs appends notifications still in C memory to dst, frees that
// memory, and maps the status of the getNotifs call that returned them.
// The notifications are handed over whatever the status: getNotifs may fail
// for one backend and still return what the others delivered.
func (a *NativeAgent) takeNotifs(op string, dst Notifs, c cNotifs, s Status) (Notifs, error) {
	n := appendNotifs(dst, c.refs, &a.dec)
	c.release()
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
