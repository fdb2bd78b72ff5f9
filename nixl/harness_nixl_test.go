//go:build nixl

package nixl

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/portpick"
)

// ucxShm makes UCX between agents of one process use shared memory rather
// than TCP (see DESIGN.md, "NIXL facts").
var ucxShm = map[string]string{"ucx_error_handling_mode": "none"}

// waitLimit bounds every wait in these tests.
const waitLimit = 30 * time.Second

func init() {
	// UCX over loopback only, as everywhere in this project's tests.
	if _, set := os.LookupEnv("UCX_NET_DEVICES"); !set {
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
}

// testName turns the test's name into a valid, unique agent name prefix.
func testName(t testing.TB) string {
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
}

// newAgent creates an agent closed at the end of the test.
func newAgent(t testing.TB, name string, cfg Config) *NativeAgent {
	t.Helper()
	a, err := New(name, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("closing %q: %v", name, err)
		}
	})
	return a
}

// newUCXAgent creates an agent with a UCX backend over shared memory.
func newUCXAgent(t testing.TB, name string, cfg Config) *NativeAgent {
	t.Helper()
	a := newAgent(t, name, cfg)
	require.NoError(t, a.CreateBackend("UCX", ucxShm))
	return a
}

// newBuffer allocates size bytes filled with a pattern from seed (zeroes
// for seed 0), freed at the end of the test after the agents are closed
// (cleanups run last-registered first, so call it after newAgent).
func newBuffer(t testing.TB, size int, seed byte) *Buffer {
	t.Helper()
	b, err := AllocBuffer(size)
	require.NoError(t, err)
	t.Cleanup(func() { b.Free() })
	fill(b.Bytes(), seed)
	return b
}

func fill(mem []byte, seed byte) {
	if seed == 0 {
		clear(mem)
		return
	}
	for i := range mem {
		mem[i] = seed + byte(i*7) + byte(i>>9)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}

func dram(descs ...Desc) XferList { return XferList{Mem: DRAM, Descs: descs} }

func regDRAM(b *Buffer) RegList { return RegList{Mem: DRAM, Descs: []RegDesc{b.RegDesc()}} }

// peers is an initiator and a target with a registered buffer each and
// each other's metadata loaded, and the notifications each has received.
type peers struct {
	t        testing.TB
	init     *NativeAgent
	target   *NativeAgent
	initBuf  *Buffer
	tgtBuf   *Buffer
	mu       sync.Mutex
	received map[*NativeAgent]Notifs
}

func newPeers(t testing.TB, size int, cfg Config) *peers {
	t.Helper()
	return newPeersNamed(t, testName(t)+".init", testName(t)+".target", size, cfg)
}

// newPeersNamed is newPeers with the agents' names given.
func newPeersNamed(t testing.TB, initName, targetName string, size int, cfg Config) *peers {
	t.Helper()
	p := &peers{t: t, received: map[*NativeAgent]Notifs{}}
	p.init = newUCXAgent(t, initName, cfg)
	p.target = newUCXAgent(t, targetName, cfg)
	p.initBuf = newBuffer(t, size, 0x11)
	p.tgtBuf = newBuffer(t, size, 0x55)
	require.NoError(t, p.init.RegisterMem(regDRAM(p.initBuf), nil))
	require.NoError(t, p.target.RegisterMem(regDRAM(p.tgtBuf), nil))
	exchangeMD(t, p.init, p.target)
	return p
}

// exchangeMD loads each agent's full metadata into the other.
func exchangeMD(t testing.TB, a, b *NativeAgent) {
	t.Helper()
	for _, pair := range [][2]*NativeAgent{{a, b}, {b, a}} {
		md, err := pair[1].LocalMD()
		require.NoError(t, err)
		name, err := pair[0].LoadRemoteMD(md)
		require.NoError(t, err)
		require.Equal(t, pair[1].Name(), name)
	}
}

// progress polls every agent's notifications once, keeping what arrives.
func (p *peers) progress(agents ...*NativeAgent) {
	p.t.Helper()
	if len(agents) == 0 {
		agents = []*NativeAgent{p.init, p.target}
	}
	for _, a := range agents {
		n, err := a.GetNotifs(nil)
		require.NoError(p.t, err)
		p.mu.Lock()
		if p.received[a] == nil {
			p.received[a] = Notifs{}
		}
		for from, msgs := range n {
			p.received[a][from] = append(p.received[a][from], msgs...)
		}
		p.mu.Unlock()
	}
}

// wait posts nothing; it polls req on the initiator, progressing both
// agents, until the transfer ends, and returns its final status.
func (p *peers) wait(req XferHandle) (Status, error) {
	p.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		s, err := p.init.XferStatus(req)
		if err != nil || s == StatusSuccess {
			return s, err
		}
		p.progress()
		if time.Now().After(deadline) {
			p.t.Fatalf("transfer %d still %s after %s", req, s, waitLimit)
		}
	}
}

// run posts req and waits for it to succeed.
func (p *peers) run(req XferHandle, opts *Options) {
	p.t.Helper()
	s, err := p.init.PostXferReq(req, opts)
	require.NoError(p.t, err)
	require.Contains(p.t, []Status{StatusSuccess, StatusInProgress}, s)
	s, err = p.wait(req)
	require.NoError(p.t, err)
	require.Equal(p.t, StatusSuccess, s)
}

// waitNotifs progresses both agents until a has received want messages in
// total from sender, and returns them.
func (p *peers) waitNotifs(a *NativeAgent, sender string, want int) [][]byte {
	p.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		p.progress()
		p.mu.Lock()
		got := p.received[a][sender]
		p.mu.Unlock()
		if len(got) >= want {
			return got
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s got %d notifications from %s after %s, want %d", a.Name(), len(got), sender, waitLimit, want)
		}
	}
}

// eventually polls cond, progressing the given agents, until it holds.
func eventually(t testing.TB, what string, cond func() bool, agents ...*NativeAgent) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		for _, a := range agents {
			a.GetNotifs(nil)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, waitLimit)
		}
		time.Sleep(time.Millisecond)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	p, err := portpick.Pick()
	require.NoError(t, err)
	return p
}

func requireBytes(t testing.TB, want, got []byte, what string) {
	t.Helper()
	if !bytes.Equal(want, got) {
		i := 0
		for i < len(want) && i < len(got) && want[i] == got[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from byte %d on (len want %d, got %d)", what, len(want), i, len(want), len(got))
	}
}
