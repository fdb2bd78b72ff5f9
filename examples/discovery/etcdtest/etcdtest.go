// Package etcdtest starts a real etcd server for tests: the etcd binary
// (Debian's etcd-server package), one member on 127.0.0.1 with free ports and
// a temporary data directory, stopped and removed when the test ends.
package etcdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gonixl/gonixl/internal/portpick"
)

// Binary returns the etcd binary's path: $ETCD_BIN, else etcd on PATH, else
// /usr/bin/etcd; "" if none is there.
func Binary() string {
	if b := os.Getenv("ETCD_BIN"); b != "" {
		return b
	}
	if b, err := exec.LookPath("etcd"); err == nil {
		return b
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	return ""
}

// Server is a running etcd member.
type Server struct {
	// Endpoint is the client URL, "http://127.0.0.1:port".
	Endpoint string
	cmd      *exec.Cmd
	out      *syncBuffer
	done     chan struct{}
	stopOnce sync.Once
}

// Start starts etcd and waits until it serves (at most 30 s); the test is
// skipped, with the reason, when no etcd binary is installed, and fails if
// etcd does not come up. The server stops when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("etcd not installed (apt-get install etcd-server, or set $ETCD_BIN): skipping the etcd tests")
	}
	var s *Server
	var err error
	// A port found free may be taken before etcd binds it: try a few times.
	for try := 0; try < 5; try++ {
		if s, err = start(bin, t.TempDir()); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func start(bin, dir string) (*Server, error) {
	cport, err := portpick.Pick()
	if err != nil {
		return nil, err
	}
	pport, err := portpick.Pick()
	if err != nil {
		return nil, err
	}
	curl := "http://127.0.0.1:" + strconv.Itoa(cport)
	purl := "http://127.0.0.1:" + strconv.Itoa(pport)
	cmd := exec.Command(bin,
		"--name", "test", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "test="+purl, "--initial-cluster-state", "new",
		// Short ticks: leases as short as 1 s are honoured.
		"--heartbeat-interval", "25", "--election-timeout", "250",
		"--log-level", "warn")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &Server{Endpoint: curl, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := s.healthy(); err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("etcd exited at start: %s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("etcd did not serve within 30 s: %s", out.String())
		}
	}
}

// healthy asks GET /health.
func (s *Server) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", s.Endpoint[len("http://"):])
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("GET /health HTTP/1.0\r\nHost: etcd\r\n\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	if !bytes.Contains(buf[:n], []byte(`"health":"true"`)) && !bytes.Contains(buf[:n], []byte(`"health": "true"`)) {
		return errors.New("not healthy yet")
	}
	return nil
}

// Stop kills etcd and waits for it to exit; idempotent.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
	})
}

// Log returns what etcd printed.
func (s *Server) Log() string { return s.out.String() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 1<<20 {
		return len(p), nil // enough to say why it failed
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
