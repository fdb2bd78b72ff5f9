package gpue2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RoleEnv is the environment variable that makes a test binary a peer: it
// names the role the child plays, and TestMain or a test dispatches on it.
const RoleEnv = "GONIXL_PEER_ROLE"

// The child reads the parent's messages from this descriptor and writes its
// own to the next (exec.Cmd.ExtraFiles start at 3); stdout and stderr stay
// the test framework's.
const (
	childReadFD  = 3
	childWriteFD = 4
)

// ErrPeer is matched by every error about the peer process or its channel.
var ErrPeer = errors.New("gpue2e: peer")

// Msg is one message on a peer channel: a kind and a JSON body.
type Msg struct {
	Kind string          `json:"k"`
	Body json.RawMessage `json:"b,omitempty"`
}

// Decode unmarshals the body into v.
func (m Msg) Decode(v any) error {
	if err := json.Unmarshal(m.Body, v); err != nil {
		return fmt.Errorf("%w: message %q: bad body: %v", ErrPeer, m.Kind, err)
	}
	return nil
}

// Conn is a message channel between a test process and its peer: JSON lines
// over a pair of pipes. Send is safe for concurrent use; Recv is for one
// goroutine.
type Conn struct {
	mu sync.Mutex
	w  io.Writer
	rf *os.File
	r  *bufio.Reader
}

func newConn(r *os.File, w io.Writer) *Conn {
	return &Conn{rf: r, r: bufio.NewReaderSize(r, 1<<16), w: w}
}

// Send writes one message.
func (c *Conn) Send(kind string, body any) error {
	m := Msg{Kind: kind}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%w: encoding %q: %v", ErrPeer, kind, err)
		}
		m.Body = b
	}
	line, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("%w: encoding %q: %v", ErrPeer, kind, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("%w: sending %q: %v", ErrPeer, kind, err)
	}
	return nil
}

// Recv waits at most timeout for the next message.
func (c *Conn) Recv(timeout time.Duration) (Msg, error) {
	if err := c.rf.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return Msg{}, fmt.Errorf("%w: setting a read deadline: %v", ErrPeer, err)
	}
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return Msg{}, fmt.Errorf("%w: no message within %s", ErrPeer, timeout)
		}
		return Msg{}, fmt.Errorf("%w: receiving: %v", ErrPeer, err)
	}
	var m Msg
	if err := json.Unmarshal(line, &m); err != nil {
		return Msg{}, fmt.Errorf("%w: malformed message %q: %v", ErrPeer, strings.TrimSpace(string(line)), err)
	}
	return m, nil
}

// Expect receives the next message and decodes it into body, failing if its
// kind is not kind. A peer reports its own failures as kind "error" with the
// message as body; Expect returns them as errors.
func (c *Conn) Expect(timeout time.Duration, kind string, body any) error {
	m, err := c.Recv(timeout)
	if err != nil {
		return fmt.Errorf("waiting for %q: %w", kind, err)
	}
	if m.Kind == "error" {
		var s string
		_ = json.Unmarshal(m.Body, &s)
		return fmt.Errorf("%w: peer failed while we waited for %q: %s", ErrPeer, kind, s)
	}
	if m.Kind != kind {
		return fmt.Errorf("%w: got message %q, want %q", ErrPeer, m.Kind, kind)
	}
	if body == nil {
		return nil
	}
	return m.Decode(body)
}

// Peer is a child process running this test binary in a role.
type Peer struct {
	cmd  *exec.Cmd
	conn *Conn
	toC  *os.File
	done chan error
}

// StartPeer starts os.Args[0] (the running test binary) with only test
// testName selected and RoleEnv=role plus env in its environment. Its stdout
// and stderr lines go to logw prefixed with the role, so its test output
// lands in the parent's log.
func StartPeer(testName, role string, env []string, logw io.Writer) (*Peer, error) {
	pr, cw, err := os.Pipe() // parent reads what the child writes
	if err != nil {
		return nil, fmt.Errorf("%w: pipe: %v", ErrPeer, err)
	}
	cr, pw, err := os.Pipe() // child reads what the parent writes
	if err != nil {
		pr.Close()
		cw.Close()
		return nil, fmt.Errorf("%w: pipe: %v", ErrPeer, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$", "-test.v", "-test.count=1", "-test.timeout=20m")
	cmd.Env = append(append(os.Environ(), RoleEnv+"="+role), env...)
	cmd.ExtraFiles = []*os.File{cr, cw}
	out := &prefixWriter{w: logw, prefix: "[" + role + "] "}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{pr, cw, cr, pw} {
			f.Close()
		}
		return nil, fmt.Errorf("%w: starting %s as %q: %v", ErrPeer, os.Args[0], role, err)
	}
	cr.Close()
	cw.Close()
	p := &Peer{cmd: cmd, conn: newConn(pr, pw), toC: pw, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); pr.Close() }()
	return p, nil
}

// Conn returns the channel to the peer.
func (p *Peer) Conn() *Conn { return p.conn }

// Wait closes the channel to the peer, which tells a peer blocked in Recv
// that the parent is gone, and waits at most timeout for it to exit; past
// that it kills it. It returns the child's exit error.
func (p *Peer) Wait(timeout time.Duration) error {
	p.toC.Close()
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("%w: exited: %v", ErrPeer, err)
		}
		return nil
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%w: still running after %s; killed", ErrPeer, timeout)
	}
}

// PeerRole returns the role this process was started in by StartPeer, or ""
// in a process that is not a peer.
func PeerRole() string { return os.Getenv(RoleEnv) }

// ParentConn returns, in a peer, the channel to the parent.
func ParentConn() (*Conn, error) {
	if PeerRole() == "" {
		return nil, fmt.Errorf("%w: %s is not set: not a peer process", ErrPeer, RoleEnv)
	}
	// Made non-blocking before wrapping, so that os.NewFile gives a
	// pollable file whose reads honour deadlines.
	for _, fd := range []int{childReadFD, childWriteFD} {
		if err := syscall.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("%w: descriptor %d: %v", ErrPeer, fd, err)
		}
	}
	r := os.NewFile(childReadFD, "from-parent")
	w := os.NewFile(childWriteFD, "to-parent")
	return newConn(r, w), nil
}

// prefixWriter writes whole lines to w, each with a prefix.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			break
		}
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i]); err != nil {
			return len(b), err
		}
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}
