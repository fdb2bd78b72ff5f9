package vllm

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The side channel against real libzmq, through pyzmq (Debian's
// python3-zmq, over libzmq5): what vLLM's listener and initiator use.

// pyzmq returns a python3 that can import zmq, or skips the test.
func pyzmq(t *testing.T) string {
	t.Helper()
	var cands, tried []string
	if p := os.Getenv("GONIXL_PYTHON"); p != "" {
		cands = append(cands, p)
	}
	// Debian's python3-zmq is in /usr/bin/python3's path, which another
	// python3 (pyenv, a venv) earlier on PATH does not see.
	cands = append(cands, "python3", "/usr/bin/python3")
	for _, c := range cands {
		path, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, c+": not found")
			continue
		}
		out, err := exec.Command(path, "-c", "import zmq; print(zmq.pyzmq_version(), zmq.zmq_version())").CombinedOutput()
		if err == nil {
			v := strings.Fields(string(out))
			t.Logf("pyzmq %s over libzmq %s (%s)", v[0], v[len(v)-1], path)
			return path
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		tried = append(tried, fmt.Sprintf("%s: %s", path, lines[len(lines)-1]))
	}
	t.Skipf("skipping the libzmq interop test: no python3 can import zmq (apt-get install -y python3-zmq, or set GONIXL_PYTHON): %s", strings.Join(tried, "; "))
	return ""
}

// python runs script with args; its stdout lines arrive on the channel.
func python(t *testing.T, py, script string, args ...string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", script}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("python stderr:\n%s", stderr.String())
		}
	})
	return lines
}

func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		require.True(t, ok, "python exited early")
		return l
	case <-time.After(15 * time.Second):
		t.Fatal("no line from python within 15 s")
		return ""
	}
}

// pyREQ is vLLM's initiator, by hand: the request bytes are written out
// here, not encoded by this package.
const pyREQ = `
import sys, zmq
ep = "tcp://localhost:%d" % int(sys.argv[1])
ctx = zmq.Context()
GET = b"\x93\xc4\x0cget_meta_msg"
def req(timeout, rid=None):
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, timeout)
    if rid is not None:
        s.setsockopt(zmq.ROUTING_ID, rid)
    s.connect(ep)
    return s
def show(tag, frames):
    print(tag, len(frames), *[f.hex() for f in frames], flush=True)
s = req(5000)
for pp, tp in [(0, 0), (0, 1), (1, 0), (1, 1)]:
    s.send(GET + bytes([pp, tp]))
    show("REQ", s.recv_multipart())
s.send(b"\x93\xacget_meta_msg\x00\x01")
show("STR", s.recv_multipart())
s.setsockopt(zmq.RCVTIMEO, 500)
s.send(GET + bytes([0, 9]))
try:
    s.recv_multipart()
    print("UNEXPECTED", flush=True)
except zmq.Again:
    print("TIMEOUT", flush=True)
s.close()
s = req(5000)
s.send(GET + bytes([1, 0]))
show("AFTER", s.recv_multipart())
d = ctx.socket(zmq.DEALER)
d.setsockopt(zmq.LINGER, 0)
d.setsockopt(zmq.RCVTIMEO, 500)
d.connect(ep)
d.send(GET + bytes([0, 0]))
try:
    d.recv_multipart()
    print("UNEXPECTED", flush=True)
except zmq.Again:
    print("NOREPLY", flush=True)
d.send_multipart([b"", GET + bytes([0, 1])])
show("DEALER", d.recv_multipart())
a, b = req(5000, b"dup"), req(5000, b"dup")
a.send(GET + bytes([0, 0]))
b.send(GET + bytes([0, 1]))
show("DUP-A", a.recv_multipart())
show("DUP-B", b.recv_multipart())
print("END", flush=True)
`

func TestSideInteropPyzmqREQ(t *testing.T) {
	noLeaks(t)
	py := pyzmq(t)
	// Bound for "localhost" (as vLLM's default host), which libzmq itself
	// cannot bind.
	s, err := ListenSide("localhost", 0, SideOptions{Now: func() float64 { return 12345.5 }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.True(t, strings.HasPrefix(s.Addr(), "127.0.0.1:"), s.Addr())
	payloads := map[SideRank][]byte{
		{0, 0}: {},
		{0, 1}: payloadFor(0, 1, 300),
		{1, 0}: []byte("one-zero"),
		{1, 1}: payloadFor(1, 1, 1<<20),
	}
	for r, p := range payloads {
		s.SetPayload(r.PP, r.TP, p)
	}
	const ts = "cb40c81cc000000000"
	want := func(tag string, r SideRank) string {
		if len(payloads[r]) == 0 {
			return tag + " 2  " + ts
		}
		return tag + " 2 " + hex.EncodeToString(payloads[r]) + " " + ts
	}
	lines := python(t, py, pyREQ, strconv.Itoa(s.Port()))
	for _, r := range []SideRank{{0, 0}, {0, 1}, {1, 0}, {1, 1}} {
		assert.Equal(t, want("REQ", r), nextLine(t, lines), "rank %v", r)
	}
	assert.Equal(t, want("STR", SideRank{0, 1}), nextLine(t, lines))
	assert.Equal(t, "TIMEOUT", nextLine(t, lines))
	assert.Equal(t, want("AFTER", SideRank{1, 0}), nextLine(t, lines))
	assert.Equal(t, "NOREPLY", nextLine(t, lines))
	// A DEALER gets the empty delimiter back as its first frame.
	assert.Equal(t, "DEALER 3  "+hex.EncodeToString(payloads[SideRank{0, 1}])+" "+ts, nextLine(t, lines))
	// Two REQs with the same ROUTING_ID each get their own reply (zmq4
	// alone would send each reply to both).
	assert.Equal(t, want("DUP-A", SideRank{0, 0}), nextLine(t, lines))
	assert.Equal(t, want("DUP-B", SideRank{0, 1}), nextLine(t, lines))
	assert.Equal(t, "END", nextLine(t, lines))
	require.Eventually(t, func() bool { return s.Stats().Served == 9 }, 2*time.Second, time.Millisecond)
	assert.Equal(t, uint64(2), s.Stats().Dropped)
}

// pyROUTER is vLLM's listener, by hand: it prints each request's frames
// and answers by the requested tp.
const pyROUTER = `
import struct, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.setsockopt(zmq.LINGER, 0)
print("PORT", s.bind_to_random_port("tcp://127.0.0.1"), flush=True)
TS = b"\xcb" + struct.pack(">d", 12345.5)
while True:
    f = s.recv_multipart()
    print("GOT", len(f), *[x.hex() for x in f], flush=True)
    if len(f) != 3 or f[1] != b"":
        continue
    pp, tp = f[2][-2], f[2][-1]
    payload = b"payload-%d-%d" % (pp, tp)
    if tp == 5:
        s.send_multipart([f[0], b"", payload, b"\x05"])
    elif tp == 6:
        s.send_multipart([f[0], b"", payload, b"x", TS])
    elif tp == 7:
        pass
    elif tp == 8:
        s.send_multipart([f[0], b"", b"\0" * 2048, TS])
    elif tp == 9:
        s.send_multipart([f[0], b"", b"\xab" * (3 << 20), TS])
    else:
        s.send_multipart([f[0], b"", payload, TS])
`

func TestSideInteropPyzmqROUTER(t *testing.T) {
	noLeaks(t)
	py := pyzmq(t)
	lines := python(t, py, pyROUTER)
	f := strings.Fields(nextLine(t, lines))
	require.Len(t, f, 2)
	require.Equal(t, "PORT", f[0])
	port, err := strconv.Atoi(f[1])
	require.NoError(t, err)

	ctx := context.Background()
	ranks := []SideRank{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 9}}
	h, err := FetchRanks(ctx, "127.0.0.1", port, ranks, SideFetchOptions{})
	require.NoError(t, err)
	require.Len(t, h.Replies, len(ranks))
	var identity string
	for i, r := range ranks {
		p := fmt.Sprintf("payload-%d-%d", r.PP, r.TP)
		if r.TP == 9 {
			p = strings.Repeat("\xab", 3<<20)
		}
		assert.Equal(t, p, string(h.Replies[i].Payload), "rank %v", r)
		assert.Equal(t, 12345.5, h.Replies[i].RemoteTS)
		// The ROUTER got [identity, empty, the exact request vLLM sends],
		// all from one socket.
		got := strings.Fields(nextLine(t, lines))
		require.Len(t, got, 4, got)
		assert.Equal(t, []string{"GOT", "3"}, got[:2])
		assert.Equal(t, fmt.Sprintf("93c40c6765745f6d6574615f6d7367%02x%02x", r.PP, r.TP), got[3])
		if i == 0 {
			identity = got[2]
		}
		assert.Equal(t, identity, got[2], "one REQ socket for every rank")
	}
	assert.NotEmpty(t, identity)

	rep, err := FetchSide(ctx, "127.0.0.1", port, 0, 5, SideFetchOptions{})
	require.NoError(t, err)
	assert.Equal(t, 5.0, rep.RemoteTS, "an integer timestamp decodes as vLLM's schema-less decoder takes it")
	prefix := fmt.Sprintf("vllm side channel: fetch from 127.0.0.1:%d pp 0 tp ", port)
	opts := SideFetchOptions{Timeout: 300 * time.Millisecond, MaxPayload: 1024}
	for tp, want := range map[int]string{
		6: "6: reply has 3 frames, want 2 (payload, timestamp) (frame count)",
		7: "7: no reply within 300ms (timeout): context deadline exceeded",
		8: "8: reply frame of 2048 bytes exceeds the 1024-byte limit (oversize)",
	} {
		_, err := FetchSide(ctx, "127.0.0.1", port, 0, tp, opts)
		require.Error(t, err)
		assert.Equal(t, prefix+want, err.Error())
	}
}
