//go:build nixl

package nixl

// GetNotifs returns and removes every notification received so far, by
// sender, in one call into NIXL (nixlAgent::getNotifs); nil when there are
// none. opts.Backends limits it to those backends. Without a progress
// thread it also progresses the agent, so call it (or XferStatus) regularly
// on every agent, including ones that only receive.
//
// If one backend fails, NIXL still returns what the others delivered: the
// result may then hold notifications and an error.
func (a *NativeAgent) GetNotifs(opts *Options) (Notifs, error) {
	const op = "nixlAgent::getNotifs"
	if err := a.enter(op); err != nil {
		return nil, err
	}
	defer a.exit()
	o, err := a.options(op, opts)
	if err != nil {
		return nil, err
	}
	b, s := shimGetNotifs(a.agent, o)
	n, derr := decodeNotifs(b)
	if derr != nil {
		return nil, &Error{Op: op, Status: StatusUnknown, Msg: derr.Error()}
	}
	return n, check(op, s, "agent %q", a.name)
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
	return check(op, shimGenNotif(a.agent, remote, msg, o), "to remote agent %q (metadata loaded?)", remote)
}
