package loopback

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gonixl/gonixl/nixl"
)

var _ nixl.Agent = (*Agent)(nil)

// Agent is a loopback implementation of nixl.Agent, created with
// Fabric.NewAgent. It supports DRAM registered from nixl.Buffers; it behaves
// as one NIXL agent with one backend that does both local and remote
// transfers and notifications. Options.Backends, SkipDescMerge and
// CustomParam are ignored. All methods are safe for concurrent use.
type Agent struct {
	f     *Fabric
	name  string
	inst  uint64 // unique on the fabric; the "connection info" in metadata
	model TransferModel

	// life is held for reading by every call and for writing by Close, so
	// Close returns only when no call is inside the agent.
	life         sync.RWMutex
	closed       atomic.Bool
	disconnected atomic.Bool

	regs regionSet // guarded by f.memMu

	mu         sync.Mutex // guards what follows; held only while taking the fabric's leaf locks (registry, faults, memory)
	peers      map[string]*peer
	nextGen    uint64
	dlists     map[nixl.DlistHandle]*dlist
	reqs       map[nixl.XferHandle]*xferReq
	nextHandle uint64
	inbox      nixl.Notifs
	copied     sync.Cond // on mu: a request's copy ended (xferReq.copying fell)
}

// peer is what an agent knows of another from its metadata.
type peer struct {
	conn uint64 // the peer's instance; 0 until connection info is loaded
	regs regionSet
	gen  uint64 // changes when the peer is forgotten and loaded again
}

func newAgent(f *Fabric, name string, inst uint64, model TransferModel) *Agent {
	a := &Agent{
		f:      f,
		name:   name,
		inst:   inst,
		model:  model,
		peers:  map[string]*peer{},
		dlists: map[nixl.DlistHandle]*dlist{},
		reqs:   map[nixl.XferHandle]*xferReq{},
		inbox:  nixl.Notifs{},
	}
	a.copied.L = &a.mu
	return a
}

// Name returns the agent's name.
func (a *Agent) Name() string { return a.name }

// Close closes the agent: its requests and prepared lists are released, its
// memory deregistered, and peers that transfer to it or notify it get
// nixl.ErrRemoteDisconnect. It waits for calls in progress, is idempotent,
// and every later call returns an error matching nixl.ErrClosed. As after
// ReleaseXferReq, no byte of its requests is written once it returns. The
// name becomes free on the fabric.
func (a *Agent) Close() error {
	a.life.Lock()
	if a.closed.Swap(true) {
		a.life.Unlock()
		return nil
	}
	a.mu.Lock()
	reqs := make([]*xferReq, 0, len(a.reqs))
	for _, r := range a.reqs {
		if r.status == nixl.StatusInProgress {
			a.f.stats.cancelled.Add(1)
		}
		reqs = append(reqs, r)
	}
	a.reqs, a.dlists, a.peers, a.inbox = nil, nil, nil, nil
	// As after ReleaseXferReq: no byte of a request is written once Close
	// returns.
	for _, r := range reqs {
		a.stopCopiesLocked(r)
	}
	a.mu.Unlock()
	a.life.Unlock()

	a.f.memMu.Lock()
	a.regs = regionSet{}
	a.f.memMu.Unlock()
	a.f.remove(a)
	a.f.purge(a, false)
	return nil
}

// enter starts a call; it fails once the agent is closed. A nil error must
// be paired with leave.
func (a *Agent) enter(op string) error {
	a.life.RLock()
	if a.closed.Load() {
		a.life.RUnlock()
		return fmt.Errorf("loopback: %s on agent %q: %w", op, a.name, nixl.ErrClosed)
	}
	return nil
}

func (a *Agent) leave() { a.life.RUnlock() }

// errorf returns the *nixl.Error of a failed call of this agent.
func (a *Agent) errorf(op string, s nixl.Status, format string, args ...any) *nixl.Error {
	return nixl.NewError("loopback."+op, s, "agent "+quote(a.name)+": "+format, args...)
}

func quote(s string) string { return strconv.Quote(s) }

// deliver puts a notification in the inbox; false if the agent is closed.
func (a *Agent) deliver(from string, msg []byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inbox == nil {
		return false
	}
	a.inbox[from] = append(a.inbox[from], msg)
	return true
}

// beginCopy reports whether req is still live and still in the posting
// epoch and, if so, counts a copy of its bytes in progress, which the
// caller must end with endCopy. ReleaseXferReq waits for it.
func (a *Agent) beginCopy(req *xferReq, epoch uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reqs[req.handle] != req || req.epoch != epoch || req.status != nixl.StatusInProgress {
		return false
	}
	req.copying++
	return true
}

// endCopy ends a copy counted by beginCopy, waking a ReleaseXferReq that
// waits for it.
func (a *Agent) endCopy(req *xferReq) {
	a.mu.Lock()
	req.copying--
	if req.copying == 0 {
		a.copied.Broadcast()
	}
	a.mu.Unlock()
}

// finish ends the posting epoch of req with a status and, for a success,
// the notification to send when the initiator sees it. It reports false
// when the request was released, reposted or already ended.
func (a *Agent) finish(req *xferReq, epoch uint64, s nixl.Status, err error, held *heldNotif) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reqs[req.handle] != req || req.epoch != epoch || req.status != nixl.StatusInProgress {
		return false
	}
	req.status, req.err, req.held = s, err, held
	return true
}

// takeHeldLocked removes and returns req's held notification, if any.
func takeHeldLocked(req *xferReq) *heldNotif {
	h := req.held
	req.held = nil
	return h
}

// release sends a held notification; call it without a.mu held.
func (a *Agent) release(h *heldNotif) {
	if h != nil {
		a.f.sendTransferNotif(a, h.target, h.msg, h.fate)
	}
}

// remoteLocked resolves a transfer target name: the agent itself, or a
// loaded peer. ok is false for an unknown name.
func (a *Agent) remoteLocked(name string) (p *peer, self, ok bool) {
	if name == a.name {
		return nil, true, true
	}
	p, ok = a.peers[name]
	return p, false, ok
}

// forgetLocked drops a peer's metadata after it was seen disconnected, if it
// was not reloaded since (NIXL's invalidateRemoteData).
func (a *Agent) forgetLocked(name string, gen uint64) {
	if p, ok := a.peers[name]; ok && p.gen == gen {
		delete(a.peers, name)
	}
}
