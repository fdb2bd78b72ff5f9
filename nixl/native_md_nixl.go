//go:build nixl

package nixl

import "fmt"

// LocalMD returns this agent's metadata: its name, backends' connection
// info and registered memory, for peers to pass to LoadRemoteMD
// (nixlAgent::getLocalMD).
func (a *NativeAgent) LocalMD() ([]byte, error) {
	const op = "nixlAgent::getLocalMD"
	if err := a.enter(op); err != nil {
		return nil, err
	}
	defer a.exit()
	md, s := shimLocalMD(a.agent)
	if err := check(op, s, func() string { return fmt.Sprintf("agent %q", a.name) }); err != nil {
		return nil, err
	}
	return md, nil
}

// LocalPartialMD returns metadata covering only descs
// (nixlAgent::getLocalPartialMD). With an empty list it carries the
// backends' connection info only; with descriptors, opts.IncludeConnInfo
// adds it, and opts.Backends limits both to those backends.
func (a *NativeAgent) LocalPartialMD(descs RegList, opts *Options) ([]byte, error) {
	const op = "nixlAgent::getLocalPartialMD"
	if err := a.enter(op); err != nil {
		return nil, err
	}
	defer a.exit()
	o, err := a.descOptions(op, descs.Mem, opts)
	if err != nil {
		return nil, err
	}
	md, s := shimLocalPartialMD(a.agent, descs, o)
	if err := check(op, s, func() string {
		return fmt.Sprintf("%d %s descriptors of agent %q (registered?)", len(descs.Descs), descs.Mem, a.name)
	}); err != nil {
		return nil, err
	}
	return md, nil
}

// LoadRemoteMD loads a peer's metadata, full or partial, and returns the
// peer's name (nixlAgent::loadRemoteMD). Partial metadata adds to what is
// already known of that peer.
func (a *NativeAgent) LoadRemoteMD(md []byte) (string, error) {
	const op = "nixlAgent::loadRemoteMD"
	if err := a.enter(op); err != nil {
		return "", err
	}
	defer a.exit()
	name, s := shimLoadRemoteMD(a.agent, md)
	if err := check(op, s, func() string { return fmt.Sprintf("%d bytes of metadata", len(md)) }); err != nil {
		return "", err
	}
	return name, nil
}

// InvalidateRemoteMD forgets a peer's metadata and disconnects from it
// (nixlAgent::invalidateRemoteMD). Requests made towards it then fail.
func (a *NativeAgent) InvalidateRemoteMD(remote string) error {
	const op = "nixlAgent::invalidateRemoteMD"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	return check(op, shimInvalidateRemoteMD(a.agent, remote), func() string { return fmt.Sprintf("remote agent %q", remote) })
}

// CheckRemoteMD reports whether the peer's metadata is loaded and, when
// descs is non-empty, covers those descriptors (nixlAgent::checkRemoteMD): a
// nil error means yes, ErrNotFound means no.
func (a *NativeAgent) CheckRemoteMD(remote string, descs XferList) error {
	const op = "nixlAgent::checkRemoteMD"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	if err := checkMem(op, descs.Mem); err != nil {
		return err
	}
	return check(op, shimCheckRemoteMD(a.agent, remote, descs), func() string {
		return fmt.Sprintf("remote agent %q, %d %s descriptors", remote, len(descs.Descs), descs.Mem)
	})
}

// SendLocalMD sends this agent's metadata to the listener of the peer at
// opts.IPAddr and opts.Port (NIXL's default port 8888 when 0), or to the
// configured metadata server when IPAddr is empty (nixlAgent::sendLocalMD).
// It returns once the send is queued; NIXL's own thread delivers it.
func (a *NativeAgent) SendLocalMD(opts *Options) error {
	return a.statusCall("nixlAgent::sendLocalMD", opts,
		func(o *shimOpts) Status { return shimSendLocalMD(a.agent, o) },
		func() string { return fmt.Sprintf("agent %q", a.name) })
}

// SendLocalPartialMD sends metadata covering descs, as LocalPartialMD
// builds it, to a peer's listener (opts.IPAddr, opts.Port) or, without
// IPAddr, to the metadata server under opts.MetadataLabel
// (nixlAgent::sendLocalPartialMD).
func (a *NativeAgent) SendLocalPartialMD(descs RegList, opts *Options) error {
	return a.regListCall("nixlAgent::sendLocalPartialMD", descs, opts, shimSendLocalPartialMD, "of")
}

// FetchRemoteMD asks the listener at opts.IPAddr/opts.Port (or the metadata
// server, under opts.MetadataLabel) for remote's metadata and loads it when
// it arrives (nixlAgent::fetchRemoteMD). It returns before the metadata is
// loaded: poll CheckRemoteMD until it succeeds.
func (a *NativeAgent) FetchRemoteMD(remote string, opts *Options) error {
	return a.statusCall("nixlAgent::fetchRemoteMD", opts,
		func(o *shimOpts) Status { return shimFetchRemoteMD(a.agent, remote, o) },
		func() string { return fmt.Sprintf("remote agent %q", remote) })
}

// InvalidateLocalMD tells the peer at opts.IPAddr/opts.Port, or the metadata
// server, to forget this agent (nixlAgent::invalidateLocalMD).
func (a *NativeAgent) InvalidateLocalMD(opts *Options) error {
	return a.statusCall("nixlAgent::invalidateLocalMD", opts,
		func(o *shimOpts) Status { return shimInvalidateLocalMD(a.agent, o) },
		func() string { return fmt.Sprintf("agent %q", a.name) })
}

// MakeConnection connects to a peer whose metadata is loaded now rather than
// at the first transfer (nixlAgent::makeConnection); opts.Backends limits it
// to those backends.
func (a *NativeAgent) MakeConnection(remote string, opts *Options) error {
	return a.statusCall("nixlAgent::makeConnection", opts,
		func(o *shimOpts) Status { return shimMakeConnection(a.agent, remote, o) },
		func() string { return fmt.Sprintf("remote agent %q (metadata loaded?)", remote) })
}
