package nixltest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// waitLimit bounds every wait of the suite. It is generous because the
// native agent may set up connections lazily, and -race slows everything.
const waitLimit = 30 * time.Second

// pollPause is the pause between polls, short enough not to slow the suite
// and long enough not to starve other goroutines on a small machine.
const pollPause = 50 * time.Microsecond

// env is the fixture of one subtest: the agents it made, the buffers it
// allocated, and the notifications drained from each agent so far. Waits
// progress every agent, since a native agent without a progress thread
// needs both sides polled to make progress.
type env struct {
	t       *testing.T
	factory Factory

	mu      sync.Mutex // serialises draining, so per-sender order survives
	agents  []nixl.Agent
	bufs    []*nixl.Buffer
	inbox   map[nixl.Agent]nixl.Notifs
	watched []posted // requests posted by post and not yet seen to end
}

// posted is a request that pump polls: NIXL's UCX backend sends the
// notification of a transfer that did not complete inside PostXferReq only
// when the initiator sees it complete, so waiting for a notification means
// polling the initiator's requests too.
type posted struct {
	agent nixl.Agent
	h     nixl.XferHandle
}

func newEnv(t *testing.T, f Factory) *env {
	e := &env{t: t, factory: f, inbox: map[nixl.Agent]nixl.Notifs{}}
	t.Cleanup(e.cleanup)
	return e
}

// cleanup closes the agents before freeing the buffers they may still have
// registered.
func (e *env) cleanup() {
	e.mu.Lock()
	agents, bufs := e.agents, e.bufs
	e.agents, e.bufs = nil, nil
	e.mu.Unlock()
	for _, a := range agents {
		if err := a.Close(); err != nil {
			e.t.Errorf("closing agent %q: %v", a.Name(), err)
		}
	}
	for _, b := range bufs {
		if err := b.Free(); err != nil {
			e.t.Errorf("freeing buffer: %v", err)
		}
	}
}

// agent makes an agent whose name is unique to the subtest.
func (e *env) agent(role string) nixl.Agent {
	e.t.Helper()
	name := strings.NewReplacer("/", ".", " ", "_").Replace(e.t.Name()) + "." + role
	a := e.factory(e.t, name)
	if a == nil {
		e.t.Fatalf("factory returned a nil agent for %q", name)
	}
	if a.Name() != name {
		e.t.Fatalf("factory made agent %q, want name %q", a.Name(), name)
	}
	e.mu.Lock()
	e.agents = append(e.agents, a)
	e.inbox[a] = nixl.Notifs{}
	e.mu.Unlock()
	return a
}

// buffer allocates a buffer filled with a pattern derived from seed; seed 0
// leaves it zeroed.
func (e *env) buffer(size int, seed byte) *nixl.Buffer {
	e.t.Helper()
	b, err := nixl.AllocBuffer(size)
	if err != nil {
		e.t.Fatalf("AllocBuffer(%d): %v", size, err)
	}
	e.mu.Lock()
	e.bufs = append(e.bufs, b)
	e.mu.Unlock()
	if seed != 0 {
		fill(b.Bytes(), seed)
	}
	return b
}

// linked makes agents a and b, named from roles ra and rb, that know each
// other, with a buffer of size bytes registered on each, filled from seedA
// and seedB (0 leaves it zeroed): the start of every two-agent transfer case.
func (e *env) linked(ra, rb string, size int, seedA, seedB byte) (a, b nixl.Agent, bufA, bufB *nixl.Buffer) {
	e.t.Helper()
	a, b = e.agent(ra), e.agent(rb)
	bufA, bufB = e.buffer(size, seedA), e.buffer(size, seedB)
	e.register(a, bufA)
	e.register(b, bufB)
	e.exchange(a, b)
	return a, b, bufA, bufB
}

// fill writes a pattern that differs per seed and has no period shorter
// than 16 MiB, so bytes copied from the wrong offset show.
func fill(p []byte, seed byte) {
	for i := range p {
		p[i] = byte(i*131+int(seed)*17) ^ byte(i>>8)*29 ^ byte(i>>16)*101 ^ seed
	}
}

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	fill(p, seed)
	return p
}

// register registers whole buffers with a.
func (e *env) register(a nixl.Agent, bufs ...*nixl.Buffer) {
	e.t.Helper()
	if err := a.RegisterMem(regList(bufs...), nil); err != nil {
		e.t.Fatalf("%s: RegisterMem: %v", a.Name(), err)
	}
}

func regList(bufs ...*nixl.Buffer) nixl.RegList {
	l := nixl.RegList{Mem: nixl.DRAM}
	for _, b := range bufs {
		l.Descs = append(l.Descs, b.RegDesc())
	}
	return l
}

func xferList(ds ...nixl.Desc) nixl.XferList {
	return nixl.XferList{Mem: nixl.DRAM, Descs: ds}
}

// load makes dst load src's full metadata.
func (e *env) load(dst, src nixl.Agent) {
	e.t.Helper()
	md, err := src.LocalMD()
	if err != nil {
		e.t.Fatalf("%s: LocalMD: %v", src.Name(), err)
	}
	name, err := dst.LoadRemoteMD(md)
	if err != nil {
		e.t.Fatalf("%s: LoadRemoteMD(%s's metadata): %v", dst.Name(), src.Name(), err)
	}
	if name != src.Name() {
		e.t.Fatalf("%s: LoadRemoteMD returned %q, want %q", dst.Name(), name, src.Name())
	}
}

// exchange makes a and b load each other's metadata.
func (e *env) exchange(a, b nixl.Agent) {
	e.t.Helper()
	e.load(a, b)
	e.load(b, a)
}

// pump polls the watched requests and drains every agent's notifications
// into the env's inboxes, which also progresses the agents.
func (e *env) pump() {
	e.mu.Lock()
	defer e.mu.Unlock()
	live := e.watched[:0]
	for _, p := range e.watched {
		// Errors are left for wait to report: a status persists.
		if st, err := p.agent.XferStatus(p.h); err == nil && st == nixl.StatusInProgress {
			live = append(live, p)
		}
	}
	e.watched = live
	for _, a := range e.agents {
		got, err := a.GetNotifs(nil)
		if err != nil {
			// A closed agent is no longer pumped; every other error is one.
			if !isClosed(err) {
				e.t.Errorf("%s: GetNotifs: %v", a.Name(), err)
			}
			continue
		}
		box := e.inbox[a]
		for from, msgs := range got {
			box[from] = append(box[from], msgs...)
		}
	}
}

// post posts h and fails the test on error.
func (e *env) post(a nixl.Agent, h nixl.XferHandle, opts *nixl.Options) {
	e.t.Helper()
	st, err := a.PostXferReq(h, opts)
	if err != nil {
		e.t.Fatalf("%s: PostXferReq: %v", a.Name(), err)
	}
	if st != nixl.StatusSuccess && st != nixl.StatusInProgress {
		e.t.Fatalf("%s: PostXferReq returned %v with no error", a.Name(), st)
	}
	e.mu.Lock()
	e.watched = append(e.watched, posted{a, h})
	e.mu.Unlock()
}

// wait polls h until it is no longer in progress, progressing every agent,
// and returns its final status. It fails the test if that takes too long.
func (e *env) wait(a nixl.Agent, h nixl.XferHandle) (nixl.Status, error) {
	e.t.Helper()
	st, err := e.waitFor(a, h)
	if errors.Is(err, errTimeout) {
		e.t.Fatalf("%s: %v", a.Name(), err)
	}
	return st, err
}

var errTimeout = errors.New("timed out")

// waitFor is wait for goroutines other than the test's: it reports a
// timeout as an error matching errTimeout.
func (e *env) waitFor(a nixl.Agent, h nixl.XferHandle) (nixl.Status, error) {
	deadline := time.Now().Add(waitLimit)
	for {
		st, err := a.XferStatus(h)
		if err != nil || st != nixl.StatusInProgress {
			return st, err
		}
		e.pump()
		if time.Now().After(deadline) {
			return st, fmt.Errorf("transfer %d still in progress after %v: %w", h, waitLimit, errTimeout)
		}
		time.Sleep(pollPause)
	}
}

// complete posts h, waits for it and requires success.
func (e *env) complete(a nixl.Agent, h nixl.XferHandle, opts *nixl.Options) {
	e.t.Helper()
	e.post(a, h, opts)
	if st, err := e.wait(a, h); err != nil || st != nixl.StatusSuccess {
		e.t.Fatalf("%s: transfer %d ended with %v, %v; want success", a.Name(), h, st, err)
	}
}

// notifs waits until a has received n notifications from sender, and takes
// them out of the inbox.
func (e *env) notifs(a nixl.Agent, sender string, n int) [][]byte {
	e.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		e.pump()
		e.mu.Lock()
		box := e.inbox[a]
		if len(box[sender]) >= n {
			got := box[sender][:n:n]
			box[sender] = box[sender][n:]
			e.mu.Unlock()
			return got
		}
		have := len(box[sender])
		e.mu.Unlock()
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %d of %d notifications from %q after %v", a.Name(), have, n, sender, waitLimit)
		}
		time.Sleep(pollPause)
	}
}

// pending returns what a has received and not yet been taken, by sender.
func (e *env) pending(a nixl.Agent) nixl.Notifs {
	e.pump()
	e.mu.Lock()
	defer e.mu.Unlock()
	out := nixl.Notifs{}
	for from, msgs := range e.inbox[a] {
		if len(msgs) > 0 {
			out[from] = msgs
		}
	}
	return out
}

// strs turns notifications into strings for readable failures.
func strs(msgs [][]byte) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m)
	}
	return out
}

func describe(err error) string {
	if err == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%v (status %v)", err, nixl.StatusOf(err))
}
