package loopback

import (
	"github.com/gonixl/gonixl/nixl"
)

// LocalMD returns the agent's metadata: its name, its connection info (its
// identity on the fabric) and every registered region, as msgpack.
func (a *Agent) LocalMD() ([]byte, error) {
	const op = "LocalMD"
	if err := a.enter(op); err != nil {
		return nil, err
	}
	defer a.leave()
	a.f.memMu.RLock()
	regs := toMDRegions(a.regs.rs)
	a.f.memMu.RUnlock()
	b, err := encodeMetadata(metadata{Agent: a.name, Fabric: a.f.id, Conn: a.inst, Regions: regs})
	if err != nil {
		return nil, a.errorf(op, nixl.StatusUnknown, "encoding metadata: %v", err)
	}
	return b, nil
}

// LocalPartialMD returns metadata that covers only descs, each of which must
// equal a registered region (else nixl.ErrNotFound). As in NIXL, it carries
// connection info only when descs is empty or opts.IncludeConnInfo is set.
func (a *Agent) LocalPartialMD(descs nixl.RegList, opts *nixl.Options) ([]byte, error) {
	const op = "LocalPartialMD"
	if err := a.enter(op); err != nil {
		return nil, err
	}
	defer a.leave()
	if len(descs.Descs) > 0 && descs.Mem != nixl.DRAM {
		return nil, a.errorf(op, nixl.StatusNotFound, "no backend for memory type %v: the loopback agent registers DRAM only", descs.Mem)
	}
	md := metadata{Agent: a.name, Fabric: a.f.id}
	if len(descs.Descs) == 0 || (opts != nil && opts.IncludeConnInfo) {
		md.Conn = a.inst
	}
	a.f.memMu.RLock()
	rs := make([]region, 0, len(descs.Descs))
	for i, d := range descs.Descs {
		j := a.regs.index(d.Desc)
		if j < 0 {
			a.f.memMu.RUnlock()
			return nil, a.errorf(op, nixl.StatusNotFound, "descriptor %d [%#x, +%d) on device %d is not registered", i, d.Addr, d.Len, d.DevID)
		}
		rs = append(rs, a.regs.rs[j])
	}
	a.f.memMu.RUnlock()
	md.Regions = toMDRegions(rs)
	b, err := encodeMetadata(md)
	if err != nil {
		return nil, a.errorf(op, nixl.StatusUnknown, "encoding metadata: %v", err)
	}
	return b, nil
}

// LoadRemoteMD loads a peer's metadata, full or partial, and returns the
// peer's name. Loading adds to what is known of the peer and is idempotent.
// Errors, as NIXL's: bytes that are not loopback metadata give
// nixl.ErrMismatch; the agent's own metadata nixl.ErrInvalidParam; metadata
// of another fabric nixl.ErrBackend (no common backend); connection info
// of a different instance of a known peer (it closed and a new agent took
// its name), or a known region with different backend metadata,
// nixl.ErrNotAllowed; regions of a peer whose connection info is not known
// yet nixl.ErrNotFound, as with NIXL's UCX backend. A failed load changes
// nothing.
func (a *Agent) LoadRemoteMD(b []byte) (string, error) {
	const op = "LoadRemoteMD"
	if err := a.enter(op); err != nil {
		return "", err
	}
	defer a.leave()
	md, err := decodeMetadata(b)
	if err != nil {
		return "", a.errorf(op, nixl.StatusMismatch, "%v", err)
	}
	if md.Agent == a.name {
		return "", a.errorf(op, nixl.StatusInvalidParam, "metadata is the agent's own; there is no need to load it")
	}
	if md.Fabric != a.f.id {
		return "", a.errorf(op, nixl.StatusBackend, "metadata of %q was made on another fabric: no common backend", md.Agent)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.peers[md.Agent]
	if p != nil {
		if md.Conn != 0 && p.conn != 0 && md.Conn != p.conn {
			return "", a.errorf(op, nixl.StatusNotAllowed, "connection info of %q changed (a new agent took the name): invalidate the old metadata first", md.Agent)
		}
		for i, r := range md.Regions {
			if p.regs.metaConflict(r.region()) {
				return "", a.errorf(op, nixl.StatusNotAllowed, "region %d of %q [%#x, +%d) is known with different backend metadata", i, md.Agent, r.Addr, r.Len)
			}
		}
	}
	if md.Conn == 0 && (p == nil || p.conn == 0) && len(md.Regions) > 0 {
		// NIXL's UCX backend needs the connection to unpack a region's keys.
		return "", a.errorf(op, nixl.StatusNotFound, "no connection info for %q: load its full metadata, or partial metadata made with IncludeConnInfo, before partial metadata without it", md.Agent)
	}
	if p == nil {
		a.nextGen++
		p = &peer{gen: a.nextGen}
		a.peers[md.Agent] = p
	}
	if md.Conn != 0 {
		p.conn = md.Conn
	}
	for _, r := range md.Regions {
		if p.regs.index(r.region().Desc) < 0 {
			p.regs.add(r.region())
		}
	}
	return md.Agent, nil
}

// InvalidateRemoteMD forgets a peer: requests made for it can no longer be
// posted (nixl.ErrNotFound), and it must be loaded again. Unknown peers give
// nixl.ErrNotFound, the agent's own name nixl.ErrInvalidParam.
func (a *Agent) InvalidateRemoteMD(remote string) error {
	const op = "InvalidateRemoteMD"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.leave()
	if remote == a.name {
		return a.errorf(op, nixl.StatusInvalidParam, "cannot invalidate the agent's own metadata")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.peers[remote]; !ok {
		return a.errorf(op, nixl.StatusNotFound, "no metadata loaded for %q", remote)
	}
	delete(a.peers, remote)
	return nil
}

// CheckRemoteMD returns nil if the peer's metadata is loaded and, when descs
// is not empty, the peer's connection info is known and its regions contain
// every descriptor; otherwise nixl.ErrNotFound. The agent's own name checks
// its own registrations.
func (a *Agent) CheckRemoteMD(remote string, descs nixl.XferList) error {
	const op = "CheckRemoteMD"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.leave()
	a.mu.Lock()
	defer a.mu.Unlock()
	p, self, ok := a.remoteLocked(remote)
	if !ok {
		return a.errorf(op, nixl.StatusNotFound, "no metadata loaded for %q", remote)
	}
	if len(descs.Descs) == 0 {
		return nil
	}
	if descs.Mem != nixl.DRAM {
		return a.errorf(op, nixl.StatusNotFound, "no backend for memory type %v", descs.Mem)
	}
	if !self && p.conn == 0 {
		return a.errorf(op, nixl.StatusNotFound, "no connection info loaded for %q", remote)
	}
	if i := a.remoteCoverLocked(p, self, descs.Descs); i >= 0 {
		d := descs.Descs[i]
		return a.errorf(op, nixl.StatusNotFound, "descriptor %d [%#x, +%d) is not in %q's loaded metadata", i, d.Addr, d.Len, remote)
	}
	return nil
}

// remoteCoverLocked returns the first descriptor the target's known regions
// do not contain, or -1.
func (a *Agent) remoteCoverLocked(p *peer, self bool, ds []nixl.Desc) int {
	if self {
		a.f.memMu.RLock()
		defer a.f.memMu.RUnlock()
		return a.regs.coversAll(ds)
	}
	return p.regs.coversAll(ds)
}
