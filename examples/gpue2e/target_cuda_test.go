//go:build nixl && cuda

package gpue2e

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// waitLimit bounds every wait of these tests.
const waitLimit = 60 * time.Second

// endpoint is an agent with one registered buffer on one device.
type endpoint struct {
	agent nixl.Agent
	m     memory
	base  uint64
	size  uint64
}

func newEndpoint(tb testing.TB, name string, dev int, size uint64) (*endpoint, error) {
	m, err := openMemory(dev)
	if err != nil {
		return nil, err
	}
	base, err := m.alloc(size)
	if err != nil {
		m.close()
		return nil, err
	}
	e := &endpoint{m: m, base: base, size: size}
	if err := m.set(base, 0, size); err != nil {
		e.close()
		return nil, err
	}
	if e.agent, err = newAgent(nil, name, m); err != nil {
		e.close()
		return nil, err
	}
	if err := e.agent.RegisterMem(e.regList(), nil); err != nil {
		e.close()
		return nil, fmt.Errorf("registering %d bytes of %s on device %d: %w", size, m.mem(), dev, err)
	}
	return e, nil
}

func (e *endpoint) regList() nixl.RegList {
	return nixl.RegList{Mem: e.m.mem(), Descs: []nixl.RegDesc{{Desc: nixl.Desc{Addr: e.base, Len: e.size, DevID: e.m.devID()}}}}
}

// desc returns a descriptor of n bytes at offset off of the buffer.
func (e *endpoint) desc(off, n uint64) nixl.Desc {
	return nixl.Desc{Addr: e.base + off, Len: n, DevID: e.m.devID()}
}

func (e *endpoint) close() error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if e.agent != nil {
		keep(e.agent.DeregisterMem(e.regList(), nil))
		keep(e.agent.Close())
	}
	if e.base != 0 {
		keep(e.m.free(e.base))
	}
	keep(e.m.close())
	return first
}

// target is the passive side of a transfer, in this process or in a peer.
type target interface {
	name() string
	md() []byte
	buf() (base, size, devID uint64)
	// fill writes the pattern of seed into each span.
	fill(seed uint64, spans []span) error
	zero(off, n uint64) error
	check(seed uint64, spans []span) error
	// notifs waits until want notifications from sender arrived and
	// returns them all (and forgets them).
	notifs(sender string, want int) ([][]byte, error)
	// progress lets an in-process target's agent make progress.
	progress()
	close() error
}

// localTarget is a target in this process.
type localTarget struct {
	e   *endpoint
	mu  sync.Mutex
	got nixl.Notifs
}

func (l *localTarget) name() string { return l.e.agent.Name() }
func (l *localTarget) md() []byte {
	md, err := l.e.agent.LocalMD()
	if err != nil {
		panic(err) // tests only; a fresh agent always has metadata
	}
	return md
}
func (l *localTarget) buf() (uint64, uint64, uint64) { return l.e.base, l.e.size, l.e.m.devID() }
func (l *localTarget) fill(seed uint64, spans []span) error {
	return fillSpans(l.e.m, seed, spans)
}
func (l *localTarget) zero(off, n uint64) error { return l.e.m.set(l.e.base+off, 0, n) }
func (l *localTarget) check(seed uint64, spans []span) error {
	return checkPattern(l.e.m, seed, spans)
}
func (l *localTarget) progress() {
	n, err := l.e.agent.GetNotifs(nil)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.got == nil {
		l.got = nixl.Notifs{}
	}
	for k, v := range n {
		l.got[k] = append(l.got[k], v...)
	}
}
func (l *localTarget) notifs(sender string, want int) ([][]byte, error) {
	return waitNotifs(l.progress, &l.mu, &l.got, sender, want)
}
func (l *localTarget) close() error { return l.e.close() }

func waitNotifs(progress func(), mu *sync.Mutex, got *nixl.Notifs, sender string, want int) ([][]byte, error) {
	deadline := time.Now().Add(waitLimit)
	for {
		progress()
		mu.Lock()
		msgs := (*got)[sender]
		if len(msgs) >= want {
			delete(*got, sender)
			mu.Unlock()
			return msgs, nil
		}
		mu.Unlock()
		if time.Now().After(deadline) {
			return msgs, fmt.Errorf("%d notifications from %q after %s, want %d", len(msgs), sender, waitLimit, want)
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// Messages between the parent and a "target" peer.
type (
	helloMsg struct {
		Name  string `json:"name"`
		MD    []byte `json:"md"`
		Base  uint64 `json:"base"`
		Size  uint64 `json:"size"`
		DevID uint64 `json:"dev_id"`
	}
	fillMsg struct {
		Seed uint64 `json:"seed"`
		Off  uint64 `json:"off"`
		N    uint64 `json:"n"`
	}
	checkMsg struct {
		Seed  uint64 `json:"seed"`
		Spans []span `json:"spans"`
	}
	notifsMsg struct {
		Sender string   `json:"sender"`
		Want   int      `json:"want"`
		Msgs   [][]byte `json:"msgs,omitempty"`
	}
)

// remoteTarget is a target in a peer process (role "target").
type remoteTarget struct {
	p     *Peer
	hello helloMsg
}

// startRemoteTarget starts a peer that allocates size bytes on device dev,
// registers them with an agent and loads initiatorMD.
func startRemoteTarget(tb testing.TB, dev int, size uint64, initiatorMD []byte) (*remoteTarget, error) {
	p, err := StartPeer("TestGPUPeer", "target", []string{"GONIXL_PEER_DEV=" + strconv.Itoa(dev), "GONIXL_PEER_SIZE=" + strconv.FormatUint(size, 10)}, os.Stderr)
	if err != nil {
		return nil, err
	}
	r := &remoteTarget{p: p}
	if err := p.Conn().Expect(waitLimit, "hello", &r.hello); err != nil {
		p.Wait(5 * time.Second)
		return nil, err
	}
	if err := r.call("md", initiatorMD, "ok", nil); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *remoteTarget) call(kind string, body any, reply string, out any) error {
	if err := r.p.Conn().Send(kind, body); err != nil {
		return err
	}
	return r.p.Conn().Expect(waitLimit, reply, out)
}

func (r *remoteTarget) name() string { return r.hello.Name }
func (r *remoteTarget) md() []byte   { return r.hello.MD }
func (r *remoteTarget) buf() (uint64, uint64, uint64) {
	return r.hello.Base, r.hello.Size, r.hello.DevID
}
func (r *remoteTarget) fill(seed uint64, spans []span) error {
	return r.call("fill", checkMsg{Seed: seed, Spans: spans}, "ok", nil)
}
func (r *remoteTarget) zero(off, n uint64) error {
	return r.call("zero", fillMsg{Off: off, N: n}, "ok", nil)
}
func (r *remoteTarget) check(seed uint64, spans []span) error {
	return r.call("check", checkMsg{Seed: seed, Spans: spans}, "ok", nil)
}
func (r *remoteTarget) notifs(sender string, want int) ([][]byte, error) {
	var m notifsMsg
	err := r.call("notifs", notifsMsg{Sender: sender, Want: want}, "notifs", &m)
	return m.Msgs, err
}
func (r *remoteTarget) progress() {}
func (r *remoteTarget) close() error {
	err := r.call("quit", nil, "bye", nil)
	if werr := r.p.Wait(waitLimit); err == nil {
		err = werr
	}
	return err
}

// TestGPUPeer is the body of the peer processes the tests start; it does
// nothing in a process that is not a peer.
func TestGPUPeer(t *testing.T) {
	switch PeerRole() {
	case "target":
		if err := runTarget(); err != nil {
			t.Fatal(err)
		}
	case "decode":
		if err := runDecode(); err != nil {
			t.Fatal(err)
		}
	default:
		t.Skip("runs only in a peer process")
	}
}

// runTarget serves a "target" peer: one registered buffer, commands from
// the parent, and its agent progressed between them.
func runTarget() error {
	c, err := ParentConn()
	if err != nil {
		return err
	}
	fail := func(err error) error { c.Send("error", err.Error()); return err }
	dev, size := envInt("GONIXL_PEER_DEV", 0), uint64(envInt("GONIXL_PEER_SIZE", 1<<20))
	e, err := newEndpoint(nil, fmt.Sprintf("target-gpu%d-pid%d", dev, os.Getpid()), dev, size)
	if err != nil {
		return fail(err)
	}
	defer e.close()
	lt := &localTarget{e: e}
	if err := c.Send("hello", helloMsg{Name: lt.name(), MD: lt.md(), Base: e.base, Size: size, DevID: e.m.devID()}); err != nil {
		return err
	}
	cmds := make(chan Msg)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := c.Recv(30 * time.Minute)
			if err != nil {
				recvErr <- err
				return
			}
			cmds <- m
			if m.Kind == "quit" {
				return
			}
		}
	}()
	for {
		var m Msg
		select {
		case m = <-cmds:
		case err := <-recvErr:
			return fmt.Errorf("parent gone: %w", err)
		default:
			lt.progress()
			time.Sleep(20 * time.Microsecond)
			continue
		}
		var err error
		reply, body := "ok", any(nil)
		switch m.Kind {
		case "md":
			var md []byte
			if err = m.Decode(&md); err == nil {
				_, err = e.agent.LoadRemoteMD(md)
			}
		case "fill":
			var f checkMsg
			if err = m.Decode(&f); err == nil {
				err = lt.fill(f.Seed, f.Spans)
			}
		case "zero":
			var f fillMsg
			if err = m.Decode(&f); err == nil {
				err = lt.zero(f.Off, f.N)
			}
		case "check":
			var ck checkMsg
			if err = m.Decode(&ck); err == nil {
				err = lt.check(ck.Seed, ck.Spans)
			}
		case "notifs":
			var n notifsMsg
			if err = m.Decode(&n); err == nil {
				n.Msgs, err = lt.notifs(n.Sender, n.Want)
				reply, body = "notifs", n
			}
		case "quit":
			return c.Send("bye", nil)
		default:
			err = fmt.Errorf("unknown command %q", m.Kind)
		}
		if err != nil {
			c.Send("error", err.Error())
			continue
		}
		if err := c.Send(reply, body); err != nil {
			return err
		}
	}
}
