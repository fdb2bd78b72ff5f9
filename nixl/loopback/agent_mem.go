package loopback

import (
	"github.com/gonixl/gonixl/nixl"
)

// RegisterMem registers DRAM that lies inside live nixl.Buffers. Other
// memory types fail with nixl.ErrNotFound, as on a NIXL agent that has no
// backend for them; a range outside every live Buffer, or of length 0, fails
// with nixl.ErrBackend, as the backend's registration would. Nothing is
// registered unless every descriptor is. As in NIXL, registering the same
// range twice is allowed and needs two deregistrations.
func (a *Agent) RegisterMem(descs nixl.RegList, _ *nixl.Options) error {
	const op = "RegisterMem"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.leave()
	if descs.Mem != nixl.DRAM {
		return a.errorf(op, nixl.StatusNotFound, "no backend for memory type %v: the loopback agent registers DRAM only", descs.Mem)
	}
	for i, d := range descs.Descs {
		if d.Len == 0 {
			return a.errorf(op, nixl.StatusBackend, "descriptor %d at %#x has length 0", i, d.Addr)
		}
		if _, err := nixl.HostBytes(d.Addr, d.Len); err != nil {
			return a.errorf(op, nixl.StatusBackend, "descriptor %d [%#x, +%d): %v", i, d.Addr, d.Len, err)
		}
	}
	a.f.memMu.Lock()
	defer a.f.memMu.Unlock()
	for _, d := range descs.Descs {
		a.regs.add(region{Desc: d.Desc, meta: append([]byte(nil), d.Meta...)})
	}
	return nil
}

// DeregisterMem deregisters exactly the given descriptors, each of which must
// equal a registered one (address, length and device), or it fails with
// nixl.ErrNotFound and deregisters nothing. It waits for transfers copying
// from or to the agent's memory, so the memory may be freed once it returns.
func (a *Agent) DeregisterMem(descs nixl.RegList, _ *nixl.Options) error {
	const op = "DeregisterMem"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.leave()
	if descs.Mem != nixl.DRAM {
		return a.errorf(op, nixl.StatusNotFound, "no backend for memory type %v: the loopback agent registers DRAM only", descs.Mem)
	}
	a.f.memMu.Lock()
	defer a.f.memMu.Unlock()
	if a.regs.len() == 0 {
		return a.errorf(op, nixl.StatusNotFound, "no memory is registered")
	}
	idx := make([]int, 0, len(descs.Descs))
	used := make(map[int]bool, len(descs.Descs))
	for i, d := range descs.Descs {
		j := a.regs.index(d.Desc)
		// The same descriptor twice in one call needs two registrations.
		for j >= 0 && used[j] {
			if j+1 < a.regs.len() && a.regs.rs[j+1].Desc == d.Desc {
				j++
			} else {
				j = -1
			}
		}
		if j < 0 {
			return a.errorf(op, nixl.StatusNotFound, "descriptor %d [%#x, +%d) on device %d is not registered", i, d.Addr, d.Len, d.DevID)
		}
		used[j] = true
		idx = append(idx, j)
	}
	a.regs.removeAt(idx)
	return nil
}
