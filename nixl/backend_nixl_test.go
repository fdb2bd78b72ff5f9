//go:build nixl

package nixl

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNativePluginsAndBackends(t *testing.T) {
	a := newAgent(t, testName(t), Config{})
	plugins, err := a.AvailPlugins()
	require.NoError(t, err)
	assert.Contains(t, plugins, "UCX")
	assert.Contains(t, plugins, "POSIX")
	assert.True(t, slices.IsSorted(plugins))

	mems, params, err := a.PluginParams("UCX")
	require.NoError(t, err)
	assert.Contains(t, mems, DRAM)
	assert.Contains(t, params, "ucx_error_handling_mode", "UCX advertises the parameter the tests set")

	mems, _, err = a.PluginParams("POSIX")
	require.NoError(t, err)
	assert.Contains(t, mems, FILE)

	_, _, err = a.PluginParams("NO_SUCH_PLUGIN")
	requireNIXLErr(t, err, ErrNotFound)
	requireNIXLErr(t, a.CreateBackend("NO_SUCH_PLUGIN", nil), ErrNotFound)

	_, _, err = a.BackendParams("UCX")
	requireNIXLErr(t, err, ErrNotFound, "no UCX backend created yet")

	require.NoError(t, a.CreateBackend("UCX", ucxShm))
	err = a.CreateBackend("UCX", nil)
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), `already has a "UCX" backend`)

	mems, params, err = a.BackendParams("UCX")
	require.NoError(t, err)
	assert.Contains(t, mems, DRAM)
	assert.Equal(t, "none", params["ucx_error_handling_mode"], "the backend runs with the parameter it was given")
}

func TestNativeUCXErrorSignalsLeftToGo(t *testing.T) {
	newUCXAgent(t, testName(t), Config{})
	v, set := os.LookupEnv("UCX_ERROR_SIGNALS")
	require.True(t, set)
	if v != "" {
		t.Skipf("UCX_ERROR_SIGNALS=%q was set by the user; gonixl leaves it alone", v)
	}
	// With UCX's SIGSEGV handler in place this would kill the process.
	recovered := func() (r any) {
		defer func() { r = recover() }()
		var p *int
		return *p
	}()
	require.NotNil(t, recovered)
	assert.Contains(t, recovered.(error).Error(), "nil pointer dereference")
}

func TestNativePOSIXFileRoundTrip(t *testing.T) {
	const size = 256 << 10
	a := newAgent(t, testName(t), Config{})
	require.NoError(t, a.CreateBackend("POSIX", nil))

	path := filepath.Join(t.TempDir(), "kv.bin")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(size))

	src := newBuffer(t, size, 0x61)
	dst := newBuffer(t, size, 0)
	file := RegList{Mem: FILE, Descs: []RegDesc{{Desc: Desc{Addr: 0, Len: size, DevID: uint64(f.Fd())}, Meta: []byte(path)}}}
	posix := &Options{Backends: []string{"POSIX"}}
	require.NoError(t, a.RegisterMem(regDRAM(src), posix))
	require.NoError(t, a.RegisterMem(regDRAM(dst), posix))
	require.NoError(t, a.RegisterMem(file, posix))

	fileSide := XferList{Mem: FILE, Descs: []Desc{{Addr: 0, Len: size, DevID: uint64(f.Fd())}}}
	run := func(op XferOp, local *Buffer) {
		t.Helper()
		req, err := a.CreateXferReq(op, dram(local.Desc(0, size)), fileSide, a.Name(), nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, a.ReleaseXferReq(req)) }()
		backend, err := a.QueryXferBackend(req)
		require.NoError(t, err)
		require.Equal(t, "POSIX", backend)
		s, err := a.PostXferReq(req, nil)
		require.NoError(t, err)
		deadline := time.Now().Add(waitLimit)
		for s != StatusSuccess {
			require.False(t, time.Now().After(deadline), "%s still in progress", op)
			s, err = a.XferStatus(req)
			require.NoError(t, err)
		}
	}

	run(Write, src) // DRAM -> FILE
	onDisk, err := os.ReadFile(path)
	require.NoError(t, err)
	requireBytes(t, pattern(size, 0x61), onDisk, "file contents after WRITE")

	run(Read, dst) // FILE -> DRAM
	requireBytes(t, pattern(size, 0x61), dst.Bytes(), "DRAM after READ from the file")

	resp, err := a.QueryMem(RegList{Mem: FILE, Descs: []RegDesc{{Meta: []byte(path)}, {Meta: []byte(path + ".missing")}}}, posix)
	require.NoError(t, err)
	require.Len(t, resp, 2)
	assert.Equal(t, "262144", resp[0]["size"])
	assert.Nil(t, resp[1], "no answer for a file that does not exist")

	_, err = a.QueryMem(file, nil)
	require.ErrorIs(t, err, ErrInvalidParam, "queryMem needs exactly one backend")

	require.NoError(t, a.DeregisterMem(file, posix))
	require.NoError(t, a.DeregisterMem(regDRAM(src), posix))
	require.NoError(t, a.DeregisterMem(regDRAM(dst), posix))
}

// libfabricChildEnv marks the child process TestNativeLibfabric runs in.
const libfabricChildEnv = "GONIXL_TEST_LIBFABRIC_CHILD"

// libfabricLoopbackEnv keeps libfabric on the loopback interface. On a host
// without EFA or CXI, NIXL's LIBFABRIC backend finds its device through the
// sockets provider and then opens the first RDM provider for that device,
// here ofi_rxm over tcp; each provider takes the host's first non-loopback
// interface unless its FI_<PROVIDER>_IFACE says otherwise, and the backend
// has no parameter for it. The child process gets these whatever the
// caller's environment says; .ci/run sets the same.
var libfabricLoopbackEnv = []string{"FI_TCP_IFACE=lo", "FI_SOCKETS_IFACE=lo"}

// TestNativeLibfabric runs its LIBFABRIC agents in a child process: once a
// LIBFABRIC backend exists, a SIGSEGV handler that UCX_ERROR_SIGNALS does
// not control stays installed, and a later recoverable Go nil dereference in
// the same process (TestNativeUCXErrorSignalsLeftToGo with -count=2) would
// kill it.
func TestNativeLibfabric(t *testing.T) {
	if os.Getenv(libfabricChildEnv) == "1" {
		testLibfabricWrite(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNativeLibfabric$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), libfabricLoopbackEnv...), libfabricChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("LIBFABRIC child process: %v\n%s", err, out)
	case bytes.Contains(out, []byte("--- SKIP: TestNativeLibfabric")):
		t.Skipf("LIBFABRIC child process skipped:\n%s", out)
	case !bytes.Contains(out, []byte("--- PASS: TestNativeLibfabric")):
		t.Fatalf("LIBFABRIC child process did not report a pass:\n%s", out)
	}
}

func testLibfabricWrite(t *testing.T) {
	probe := newAgent(t, testName(t)+".probe", Config{})
	plugins, err := probe.AvailPlugins()
	require.NoError(t, err)
	if !slices.Contains(plugins, "LIBFABRIC") {
		t.Skipf("no LIBFABRIC plugin in NIXL's plugin directory (found %v)", plugins)
	}
	cfg := Config{ProgressThread: true}
	mk := func(role string) *NativeAgent {
		a := newAgent(t, testName(t)+"."+role, cfg)
		if err := a.CreateBackend("LIBFABRIC", nil); err != nil {
			t.Skipf("LIBFABRIC plugin present but its backend cannot start here: %v", err)
		}
		return a
	}
	init, target := mk("init"), mk("target")
	const size = 64 << 10
	src := newBuffer(t, size, 0x71)
	dst := newBuffer(t, size, 0)
	require.NoError(t, init.RegisterMem(regDRAM(src), nil))
	require.NoError(t, target.RegisterMem(regDRAM(dst), nil))
	exchangeMD(t, init, target)

	p := &peers{t: t, init: init, target: target, received: map[*NativeAgent]Notifs{}}
	req, err := init.CreateXferReq(Write, dram(src.Desc(0, size)), dram(dst.Desc(0, size)), target.Name(), NotifOptions([]byte("fabric")))
	require.NoError(t, err)
	p.run(req, nil)
	require.NoError(t, init.ReleaseXferReq(req))
	// The notification follows the data, so the bytes are checked after it.
	assert.Equal(t, [][]byte{[]byte("fabric")}, p.waitNotifs(target, init.Name(), 1))
	requireBytes(t, pattern(size, 0x71), dst.Bytes(), "LIBFABRIC WRITE")
	requireLoopbackSockets(t)
}

// requireLoopbackSockets checks that every IP socket this process holds,
// listening or connected, is bound to 127.0.0.1 and, if connected, talks to
// 127.0.0.1: the addresses LIBFABRIC put in the agents' metadata are the
// ones their connections went to. It also requires at least one connected
// socket, so that it cannot pass on a process that made no connection.
func requireLoopbackSockets(t *testing.T) {
	t.Helper()
	const loopback = "127.0.0.1"
	var off []string
	connected := 0
	socks := processIPSockets(t)
	for _, s := range socks {
		t.Logf("socket: %s", s)
		peer := s.remote.Addr()
		if peer.IsValid() && !peer.IsUnspecified() {
			connected++
			if peer.String() != loopback {
				off = append(off, s.String()+" (peer off "+loopback+")")
				continue
			}
		}
		if s.local.Addr().String() != loopback {
			off = append(off, s.String()+" (bound off "+loopback+")")
		}
	}
	assert.Empty(t, off, "LIBFABRIC left 127.0.0.1; the tests pin it with %v", libfabricLoopbackEnv)
	require.NotZero(t, connected, "the LIBFABRIC agents hold no connected IP socket: nothing shows which address they used (sockets: %v)", socks)
}

// ipSocket is one IP socket of /proc/self/net/{tcp,tcp6,udp,udp6}.
type ipSocket struct {
	proto, state  string
	local, remote netip.AddrPort
}

func (s ipSocket) String() string {
	return fmt.Sprintf("%s %s %s -> %s", s.proto, s.state, s.local, s.remote)
}

// processIPSockets lists the IP sockets this process holds: those of the
// network namespace's tables whose inode is one of the process's open
// descriptors.
func processIPSockets(t *testing.T) []ipSocket {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // closed since (ReadDir's own descriptor is one)
		}
		if ino, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var socks []ipSocket
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		data, err := os.ReadFile("/proc/self/net/" + proto)
		if errors.Is(err, fs.ErrNotExist) {
			continue // no IPv6 in this kernel
		}
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		for _, line := range lines[1:] { // the first is the header
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
			f := strings.Fields(line)
			require.GreaterOrEqual(t, len(f), 10, "/proc/self/net/%s: %q", proto, line)
			if !inodes[f[9]] {
				continue
			}
			state := "st=" + f[3]
			switch {
			case strings.HasPrefix(proto, "tcp") && f[3] == "0A":
				state = "LISTEN"
			case strings.HasPrefix(proto, "tcp") && f[3] == "01":
				state = "ESTABLISHED"
			}
			socks = append(socks, ipSocket{proto: proto, state: state, local: procNetAddr(t, f[1]), remote: procNetAddr(t, f[2])})
		}
	}
	return socks
}

// procNetAddr parses an address of /proc/net/tcp: hex address, colon, hex
// port, where the kernel prints each 32-bit word of the address as a number
// in host byte order.
func procNetAddr(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	host, port, ok := strings.Cut(s, ":")
	require.True(t, ok, "address %q", s)
	raw, err := hex.DecodeString(host)
	require.NoError(t, err, "address %q", s)
	require.True(t, len(raw) == 4 || len(raw) == 16, "address %q", s)
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(raw[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	n, err := strconv.ParseUint(port, 16, 16)
	require.NoError(t, err, "address %q", s)
	return netip.AddrPortFrom(addr.Unmap(), uint16(n))
}
