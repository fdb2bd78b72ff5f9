//go:build nixl

package nixl

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// NativeAgent is a NIXL agent (C++ nixlAgent) driven from Go. Create it with
// New and release it with Close.
//
// All methods are safe for concurrent use. With Config.SyncMode SyncNone
// (NIXL's default, in which NIXL itself does no locking) gonixl serialises
// the agent's calls with a mutex; with SyncStrict or SyncRW it leaves the
// locking to NIXL so that, for example, several goroutines can post
// transfers at once. Handles are checked in Go before NIXL sees them, and a
// handle is never freed while another call is using it.
type NativeAgent struct {
	name string
	cfg  Config

	// Calls hold call (under SyncNone, where NIXL does no locking and gonixl
	// serialises the calls) or life for reading (otherwise); Close holds
	// both, so it waits for calls in flight and no call starts on a deleted
	// agent. closed is written under both and read under either.
	serial bool
	call   sync.Mutex
	life   sync.RWMutex
	closed bool
	agent  uintptr // nixlAgent*

	bmu      sync.RWMutex
	backends map[string]uintptr // backend name (its plugin type) -> nixlBackendH*

	xfers  handleTable // XferHandle -> nixlXferReqH*
	dlists handleTable // DlistHandle -> nixlDlistH*

	notifMu sync.Mutex   // one GetNotifs at a time
	scratch notifScratch // C buffer GetNotifs results are written to
	dec     notifDecoder // turns them into Go values
}

var quietUCXSignals sync.Once

// New creates a NIXL agent named name (nixlAgent::nixlAgent) with every
// field of cfg passed to nixlAgentConfig. The agent has no backends yet: add
// them with CreateBackend.
//
// Before the first agent is created New sets UCX_ERROR_SIGNALS to the empty
// string unless the environment already has it, because UCX's own SIGSEGV
// and SIGBUS handlers would turn recoverable Go panics into process crashes.
func New(name string, cfg Config) (*NativeAgent, error) {
	const op = "nixlAgent::nixlAgent"
	if name == "" {
		return nil, &Error{Op: op, Status: StatusInvalidParam, Msg: "agent name is empty"}
	}
	if cfg.SyncMode < SyncNone || cfg.SyncMode > SyncRW {
		return nil, &Error{Op: op, Status: StatusInvalidParam, Msg: fmt.Sprintf("unknown thread-sync mode %d", cfg.SyncMode)}
	}
	if cfg.ProgressThreadDelay < 0 || cfg.ListenThreadDelay < 0 || cfg.EtcdWatchTimeout < 0 {
		return nil, &Error{Op: op, Status: StatusInvalidParam, Msg: "negative delay or timeout in Config"}
	}
	quietUCXSignals.Do(func() {
		if _, set := os.LookupEnv("UCX_ERROR_SIGNALS"); !set {
			os.Setenv("UCX_ERROR_SIGNALS", "")
		}
	})
	cfg = cfg.withDefaults()
	ptr, s := shimAgentNew(name, cfg)
	if s != StatusSuccess {
		msg := fmt.Sprintf("creating agent %q", name)
		if cfg.ListenThread {
			msg += fmt.Sprintf(" (is listener port %d free?)", cfg.ListenPort)
		}
		return nil, &Error{Op: op, Status: failed(s), Msg: msg}
	}
	scratch, ok := newNotifScratch()
	if !ok {
		shimAgentDelete(ptr)
		return nil, &Error{Op: op, Status: StatusUnknown, Msg: fmt.Sprintf("creating agent %q: out of C memory for its notification buffers", name)}
	}
	serial := cfg.SyncMode == SyncNone
	return &NativeAgent{
		name:     name,
		cfg:      cfg,
		agent:    ptr,
		serial:   serial,
		xfers:    handleTable{serial: serial},
		dlists:   handleTable{serial: serial},
		backends: make(map[string]uintptr),
		scratch:  scratch,
	}, nil
}

// failed maps a non-success status of a call that has no in-progress
// result to a failure status.
func failed(s Status) Status {
	if s.IsError() {
		return s
	}
	return StatusUnknown
}

// Name returns the agent's name. It needs no NIXL call and works after Close.
func (a *NativeAgent) Name() string { return a.name }

// Config returns the configuration the agent was created with, NIXL's
// defaults filled in.
func (a *NativeAgent) Config() Config { return a.cfg }

// enter starts a call: it fails with ErrClosed after Close, and otherwise
// holds the agent alive until exit. Under SyncNone a single mutex both
// serialises the calls and keeps Close out; otherwise calls share a read
// lock that Close takes for writing.
func (a *NativeAgent) enter(op string) error {
	if a.serial {
		a.call.Lock()
		if a.closed {
			a.call.Unlock()
			return a.closedError(op)
		}
		return nil
	}
	a.life.RLock()
	if a.closed {
		a.life.RUnlock()
		return a.closedError(op)
	}
	return nil
}

func (a *NativeAgent) exit() {
	if a.serial {
		a.call.Unlock()
		return
	}
	a.life.RUnlock()
}

func (a *NativeAgent) closedError(op string) error {
	return fmt.Errorf("nixl: %s on agent %q: %w", op, a.name, ErrClosed)
}

// check turns a status into the Go result: nil for success and in-progress,
// an *Error naming op and, from detail, the context for failures. detail
// runs only on failure, so the success path formats and allocates nothing.
func check(op string, s Status, detail func() string) error {
	if !s.IsError() {
		return nil
	}
	e := &Error{Op: op, Status: s}
	if detail != nil {
		e.Msg = detail()
	}
	return e
}

// options resolves opts for the shim. Backend names must name backends
// created on this agent.
func (a *NativeAgent) options(op string, opts *Options) (*shimOpts, error) {
	if opts == nil {
		return nil, nil
	}
	o := &shimOpts{
		present:         true,
		hasNotif:        opts.Notif != nil,
		notif:           opts.Notif,
		skipDescMerge:   opts.SkipDescMerge,
		includeConnInfo: opts.IncludeConnInfo,
		ipAddr:          opts.IPAddr,
		port:            opts.Port,
		label:           opts.MetadataLabel,
		custom:          opts.CustomParam,
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, &Error{Op: op, Status: StatusInvalidParam, Msg: fmt.Sprintf("port %d out of range", opts.Port)}
	}
	if len(opts.Backends) > 0 {
		o.backends = make([]uintptr, len(opts.Backends))
		a.bmu.RLock()
		defer a.bmu.RUnlock()
		for i, name := range opts.Backends {
			b, ok := a.backends[name]
			if !ok {
				return nil, &Error{Op: op, Status: StatusNotFound,
					Msg: fmt.Sprintf("backend %q was not created on agent %q (create it with CreateBackend)", name, a.name)}
			}
			o.backends[i] = b
		}
	}
	return o, nil
}

// descOptions checks a descriptor list's memory type, then resolves opts:
// the checks every call that takes descriptors and options makes, in this
// order, before it crosses into NIXL.
func (a *NativeAgent) descOptions(op string, m MemType, opts *Options) (*shimOpts, error) {
	if err := checkMem(op, m); err != nil {
		return nil, err
	}
	return a.options(op, opts)
}

// statusCall runs a NIXL call whose only inputs besides the agent are
// options and whose only result is a status: it holds the agent for the
// call, resolves opts, and maps a failure to an *Error with detail. call
// runs while the agent is held, so it may read a.agent.
func (a *NativeAgent) statusCall(op string, opts *Options, call func(o *shimOpts) Status, detail func() string) error {
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	o, err := a.options(op, opts)
	if err != nil {
		return err
	}
	return check(op, call(o), detail)
}

// regListCall is statusCall for the NIXL calls that also take a
// registration list (registerMem, deregisterMem, sendLocalPartialMD); the
// failure message counts the descriptors, "<relation> agent <name>".
func (a *NativeAgent) regListCall(op string, descs RegList, opts *Options, call func(agent uintptr, l RegList, o *shimOpts) Status, relation string) error {
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	o, err := a.descOptions(op, descs.Mem, opts)
	if err != nil {
		return err
	}
	return check(op, call(a.agent, descs, o), func() string {
		return fmt.Sprintf("%d %s descriptors %s agent %q", len(descs.Descs), descs.Mem, relation, a.name)
	})
}

// malformed reports a result from the shim that gonixl could not decode:
// the NIXL call succeeded, but its answer is lost.
func malformed(op string, err error) error {
	return &Error{Op: op, Status: StatusUnknown, Msg: err.Error()}
}

// checkMem rejects memory types NIXL does not define before they reach C++,
// where an out-of-range enum is undefined behaviour.
func checkMem(op string, m MemType) error {
	if m < DRAM || m > FILE {
		return &Error{Op: op, Status: StatusInvalidParam, Msg: fmt.Sprintf("unknown memory type %d", int32(m))}
	}
	return nil
}

// Close destroys the agent (nixlAgent::~nixlAgent) after releasing every
// transfer request and prepared list still held, which cancels transfers in
// flight. It waits for calls in progress on other goroutines, is idempotent,
// and afterwards every method returns an error matching ErrClosed. Memory
// stays registered until the agent is destroyed; Buffers must be freed
// only after Close (or DeregisterMem).
func (a *NativeAgent) Close() error {
	a.life.Lock()
	defer a.life.Unlock()
	a.call.Lock()
	defer a.call.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var errs []error
	for _, req := range a.xfers.drain() {
		if s := shimReleaseXferReq(a.agent, req); s.IsError() {
			errs = append(errs, &Error{Op: "nixlAgent::releaseXferReq", Status: s, Msg: "releasing a request left open at Close"})
		}
	}
	for _, dl := range a.dlists.drain() {
		if s := shimReleaseDlist(a.agent, dl); s.IsError() {
			errs = append(errs, &Error{Op: "nixlAgent::releasedDlistH", Status: s, Msg: "releasing a prepared list left open at Close"})
		}
	}
	if s := shimAgentDelete(a.agent); s.IsError() {
		errs = append(errs, &Error{Op: "nixlAgent::~nixlAgent", Status: s, Msg: fmt.Sprintf("destroying agent %q", a.name)})
	}
	a.agent = 0
	a.notifMu.Lock()
	a.scratch.free()
	a.notifMu.Unlock()
	a.bmu.Lock()
	a.backends = nil
	a.bmu.Unlock()
	return errors.Join(errs...)
}
