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
	return a.regListCall("nixlAgent::registerMem", descs, opts, shimRegisterMem, "on")
}

// DeregisterMem undoes RegisterMem (nixlAgent::deregisterMem); each
// descriptor must equal one that was registered.
func (a *NativeAgent) DeregisterMem(descs RegList, opts *Options) error {
	return a.regListCall("nixlAgent::deregisterMem", descs, opts, shimDeregisterMem, "on")
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
	o, err := a.descOptions(op, descs.Mem, opts)
	if err != nil {
		return nil, err
	}
	b, s := shimQueryMem(a.agent, descs, o)
	if err := check(op, s, func() string { return fmt.Sprintf("%d %s descriptors", len(descs.Descs), descs.Mem) }); err != nil {
		return nil, err
	}
	resp, err := decodeQuery(b)
	if err != nil {
		return nil, malformed(op, err)
	}
	return resp, nil
}
