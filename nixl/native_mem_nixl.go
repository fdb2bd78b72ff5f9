//go:build nixl

package nixl

import "fmt"

// RegisterMem registers memory with the agent's backends
// (nixlAgent::registerMem): DRAM and VRAM by address, length and device id,
// FILE by file descriptor (DevID) with Addr as offset, BLK and OBJ as their
// backends define, each descriptor optionally with backend metadata (Meta,
// e.g. an object key). opts.Backends limits registration to those backends.
//
// The memory must stay valid until DeregisterMem or Close. Never register
// Go heap memory: use Buffer or memory from C.
func (a *NativeAgent) RegisterMem(descs RegList, opts *Options) error {
	const op = "nixlAgent::registerMem"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	if err := checkMem(op, descs.Mem); err != nil {
		return err
	}
	o, err := a.options(op, opts)
	if err != nil {
		return err
	}
	return check(op, shimRegisterMem(a.agent, descs, o), func() string {
		return fmt.Sprintf("%d %s descriptors on agent %q", len(descs.Descs), descs.Mem, a.name)
	})
}

// DeregisterMem undoes RegisterMem (nixlAgent::deregisterMem); each
// descriptor must equal one that was registered.
func (a *NativeAgent) DeregisterMem(descs RegList, opts *Options) error {
	const op = "nixlAgent::deregisterMem"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	if err := checkMem(op, descs.Mem); err != nil {
		return err
	}
	o, err := a.options(op, opts)
	if err != nil {
		return err
	}
	return check(op, shimDeregisterMem(a.agent, descs, o), func() string {
		return fmt.Sprintf("%d %s descriptors on agent %q", len(descs.Descs), descs.Mem, a.name)
	})
}

// QueryMem asks a backend about memory or storage (nixlAgent::queryMem),
// for example whether files exist for the POSIX or object backends. Name the
// backend in opts.Backends. The result has one entry per descriptor: nil
// where the backend has no information, else its key/value answer.
func (a *NativeAgent) QueryMem(descs RegList, opts *Options) ([]map[string]string, error) {
	const op = "nixlAgent::queryMem"
	if err := a.enter(op); err != nil {
		return nil, err
	}
	defer a.exit()
	if err := checkMem(op, descs.Mem); err != nil {
		return nil, err
	}
	o, err := a.options(op, opts)
	if err != nil {
		return nil, err
	}
	b, s := shimQueryMem(a.agent, descs, o)
	if err := check(op, s, func() string { return fmt.Sprintf("%d %s descriptors", len(descs.Descs), descs.Mem) }); err != nil {
		return nil, err
	}
	resp, err := decodeQuery(b)
	if err != nil {
		return nil, &Error{Op: op, Status: StatusUnknown, Msg: err.Error()}
	}
	return resp, nil
}
