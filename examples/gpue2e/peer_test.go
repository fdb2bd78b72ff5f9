package gpue2e

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPeerProcess is the child's side of TestPeerRoundTrip: it answers
// every "echo" with "echoed" and the same body, fails on purpose on "fail",
// and returns when the parent closes the channel.
func TestPeerProcess(t *testing.T) {
	if PeerRole() != "echo" {
		t.Skip("runs only as a child of TestPeerRoundTrip")
	}
	c, err := ParentConn()
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := c.Recv(10 * time.Second)
		if err != nil {
			return // the parent closed the channel
		}
		switch m.Kind {
		case "echo":
			var s string
			if err := m.Decode(&s); err != nil {
				t.Fatal(err)
			}
			c.Send("echoed", s+"/"+os.Getenv("EXTRA"))
		case "fail":
			c.Send("error", "asked to fail")
		}
	}
}

func TestPeerRoundTrip(t *testing.T) {
	var log bytes.Buffer
	p, err := StartPeer("TestPeerProcess", "echo", []string{"EXTRA=x1"}, &syncBuffer{b: &log})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Conn()
	for _, s := range []string{"a", strings.Repeat("b", 200_000)} {
		if err := c.Send("echo", s); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := c.Expect(10*time.Second, "echoed", &got); err != nil {
			t.Fatal(err)
		}
		if got != s+"/x1" {
			t.Fatalf("echo of %d bytes came back as %d bytes", len(s), len(got))
		}
	}
	c.Send("fail", nil)
	err = c.Expect(10*time.Second, "echoed", nil)
	if !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), "asked to fail") {
		t.Fatalf("peer's error: got %v", err)
	}
	if err := p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "[echo] --- PASS: TestPeerProcess") {
		t.Fatalf("child's output missing from the log:\n%s", log.String())
	}
}

func TestRecvDeadline(t *testing.T) {
	p, err := StartPeer("TestPeerProcess", "echo", nil, &syncBuffer{b: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = p.Conn().Recv(200 * time.Millisecond)
	if !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), "no message within 200ms") {
		t.Fatalf("Recv with nothing sent: got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Recv returned after %s", d)
	}
	if err := p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestParentConnOutsidePeer(t *testing.T) {
	if PeerRole() != "" {
		t.Skip("in a peer")
	}
	if _, err := ParentConn(); !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), RoleEnv) {
		t.Fatalf("ParentConn outside a peer: got %v", err)
	}
}

type syncBuffer struct {
	b *bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) { return s.b.Write(p) }
