//go:build nixl

package nixl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNativePartialMetadata(t *testing.T) {
	init := newUCXAgent(t, testName(t)+".init", Config{})
	target := newUCXAgent(t, testName(t)+".target", Config{})
	src := newBuffer(t, 8192, 0x31)
	shared := newBuffer(t, 8192, 0)
	private := newBuffer(t, 8192, 0)
	require.NoError(t, init.RegisterMem(regDRAM(src), nil))
	require.NoError(t, target.RegisterMem(regDRAM(shared), nil))
	require.NoError(t, target.RegisterMem(regDRAM(private), nil))

	// Connection info only: the peer is known but no memory is.
	conn, err := target.LocalPartialMD(RegList{Mem: DRAM}, nil)
	require.NoError(t, err)
	name, err := init.LoadRemoteMD(conn)
	require.NoError(t, err)
	require.Equal(t, target.Name(), name)
	require.NoError(t, init.CheckRemoteMD(target.Name(), XferList{Mem: DRAM}))
	require.ErrorIs(t, init.CheckRemoteMD(target.Name(), dram(shared.Desc(0, 8192))), ErrNotFound)

	// Then the shared buffer only (with the connection info again, where
	// the binding can ask for it).
	md, err := target.LocalPartialMD(regDRAM(shared), connInfoOpts())
	require.NoError(t, err)
	_, err = init.LoadRemoteMD(md)
	require.NoError(t, err)
	require.NoError(t, init.CheckRemoteMD(target.Name(), dram(shared.Desc(0, 8192))))
	require.NoError(t, init.CheckRemoteMD(target.Name(), dram(shared.Desc(100, 50))), "a sub-range of loaded memory")
	require.ErrorIs(t, init.CheckRemoteMD(target.Name(), dram(private.Desc(0, 8192))), ErrNotFound)

	_, err = init.CreateXferReq(Write, dram(src.Desc(0, 8192)), dram(private.Desc(0, 8192)), target.Name(), nil)
	requireNIXLErr(t, err, ErrNotFound, "memory the partial metadata did not cover")

	md, err = init.LocalMD()
	require.NoError(t, err)
	_, err = target.LoadRemoteMD(md)
	require.NoError(t, err)
	p := &peers{t: t, init: init, target: target, received: map[*NativeAgent]Notifs{}}
	req, err := init.CreateXferReq(Write, dram(src.Desc(0, 8192)), dram(shared.Desc(0, 8192)), target.Name(), nil)
	require.NoError(t, err)
	p.run(req, nil)
	require.NoError(t, init.ReleaseXferReq(req))
	requireBytes(t, pattern(8192, 0x31), shared.Bytes(), "WRITE through partial metadata")
}

// NIXL does not refuse partial metadata for memory that is not registered:
// the metadata simply does not cover it.
func TestNativePartialMetadataOfUnregisteredMemory(t *testing.T) {
	a := newUCXAgent(t, testName(t)+".a", Config{})
	b := newUCXAgent(t, testName(t)+".b", Config{})
	buf := newBuffer(t, 4096, 0)
	if viaCAPI {
		// No includeConnInfo over the C API: the connection info first.
		conn, err := a.LocalPartialMD(RegList{Mem: DRAM}, nil)
		require.NoError(t, err)
		_, err = b.LoadRemoteMD(conn)
		require.NoError(t, err)
	}
	md, err := a.LocalPartialMD(regDRAM(buf), connInfoOpts())
	require.NoError(t, err)
	name, err := b.LoadRemoteMD(md)
	require.NoError(t, err)
	require.Equal(t, a.Name(), name)
	require.NoError(t, b.CheckRemoteMD(a.Name(), XferList{Mem: DRAM}))
	require.ErrorIs(t, b.CheckRemoteMD(a.Name(), dram(buf.Desc(0, 4096))), ErrNotFound)
}

// connInfoOpts asks for the connection info with partial metadata where the
// binding can (nil over the C API, which has no includeConnInfo).
func connInfoOpts() *Options {
	if viaCAPI {
		return nil
	}
	return &Options{IncludeConnInfo: true}
}

// Over the C API, IncludeConnInfo is refused before NIXL is called, as are
// the other options and the Config field that the C API cannot carry.
func TestNativeCAPIRefusesWhatItCannotCarry(t *testing.T) {
	if !viaCAPI {
		t.Skip("the C++ binding carries every option")
	}
	a := newUCXAgent(t, testName(t)+".a", Config{})
	buf := newBuffer(t, 4096, 0)
	require.NoError(t, a.RegisterMem(regDRAM(buf), nil))
	for name, o := range map[string]*Options{
		"IncludeConnInfo": {IncludeConnInfo: true},
		"MetadataLabel":   {MetadataLabel: "label"},
	} {
		_, err := a.LocalPartialMD(regDRAM(buf), o)
		require.ErrorIs(t, err, ErrNotSupported, name)
	}
	// The C API takes names as C strings: one holding a NUL byte is refused
	// rather than cut short.
	err := a.GenNotif("peer\x00other", []byte("m"), nil)
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), "nixlAgent::genNotif", "refused by the binding's C side")
	_, err = New(testName(t)+"\x00cut", Config{})
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), "nixlAgent::nixlAgent")

	_, err = New(testName(t)+".etcd", Config{EtcdWatchTimeout: time.Second})
	require.ErrorIs(t, err, ErrNotSupported, "EtcdWatchTimeout other than NIXL's default")
	// NIXL's default, spelt out, is what the C API gives every agent.
	b, err := New(testName(t)+".default", Config{EtcdWatchTimeout: DefaultEtcdWatchTimeout})
	require.NoError(t, err)
	require.NoError(t, b.Close())
}

// Every call that names a remote agent copies the name into a C string
// (capi.c's remote_call_new): one holding a NUL byte is refused by the C
// side, and options the C API cannot carry are refused first, before the
// name.
func TestNativeCAPIRemoteNames(t *testing.T) {
	if !viaCAPI {
		t.Skip("the C++ binding takes names as std::string")
	}
	p := newPeers(t, 4096, Config{})
	bad := p.target.Name() + "\x00x"
	local, remote := dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096))
	calls := map[string]func(name string, o *Options) error{
		"nixlAgent::checkRemoteMD":  func(n string, _ *Options) error { return p.init.CheckRemoteMD(n, remote) },
		"nixlAgent::fetchRemoteMD":  func(n string, o *Options) error { return p.init.FetchRemoteMD(n, o) },
		"nixlAgent::makeConnection": func(n string, o *Options) error { return p.init.MakeConnection(n, o) },
		"nixlAgent::genNotif":       func(n string, o *Options) error { return p.init.GenNotif(n, []byte("m"), o) },
		"nixlAgent::prepXferDlist": func(n string, o *Options) error {
			h, err := p.init.PrepXferDlist(n, remote, o)
			if err == nil {
				require.NoError(t, p.init.ReleaseDlistHandle(h))
			}
			return err
		},
		"nixlAgent::createXferReq": func(n string, o *Options) error {
			h, err := p.init.CreateXferReq(Write, local, remote, n, o)
			if err == nil {
				require.NoError(t, p.init.ReleaseXferReq(h))
			}
			return err
		},
	}
	for op, call := range calls {
		err := call(bad, nil)
		require.ErrorIs(t, err, ErrInvalidParam, op)
		assert.Contains(t, err.Error(), op, "refused by the binding's C side")
		if op != "nixlAgent::checkRemoteMD" { // it takes no options
			require.ErrorIs(t, call(bad, &Options{MetadataLabel: "label"}), ErrNotSupported, op)
		}
	}
	// The same calls with the right name go through.
	require.NoError(t, calls["nixlAgent::checkRemoteMD"](p.target.Name(), nil))
	require.NoError(t, calls["nixlAgent::prepXferDlist"](p.target.Name(), nil))
	require.NoError(t, calls["nixlAgent::createXferReq"](p.target.Name(), nil))
	require.NoError(t, calls["nixlAgent::genNotif"](p.target.Name(), nil))
}

func TestNativeInvalidateRemote(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	require.NoError(t, err)
	p.run(req, nil)

	require.NoError(t, p.init.InvalidateRemoteMD(p.target.Name()))
	require.ErrorIs(t, p.init.CheckRemoteMD(p.target.Name(), XferList{Mem: DRAM}), ErrNotFound)

	_, err = p.init.PostXferReq(req, nil)
	requireNIXLErr(t, err, ErrNotFound, "posting a request to an invalidated peer")
	assert.Contains(t, err.Error(), "nixlAgent::postXferReq")

	_, err = p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	requireNIXLErr(t, err, ErrNotFound)
	_, err = p.init.PrepXferDlist(p.target.Name(), dram(p.tgtBuf.Desc(0, 4096)), nil)
	requireNIXLErr(t, err, ErrNotFound)
	require.ErrorIs(t, p.init.GenNotif(p.target.Name(), []byte("x"), nil), ErrNotFound)
	require.Error(t, p.init.InvalidateRemoteMD(p.target.Name()), "invalidating twice")
	require.NoError(t, p.init.ReleaseXferReq(req), "a request to an invalidated peer can still be released")

	// Loading the metadata again makes the peer usable again.
	md, err := p.target.LocalMD()
	require.NoError(t, err)
	_, err = p.init.LoadRemoteMD(md)
	require.NoError(t, err)
	fill(p.tgtBuf.Bytes(), 0)
	req, err = p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	require.NoError(t, err)
	p.run(req, nil)
	requireBytes(t, pattern(4096, 0x11), p.tgtBuf.Bytes(), "WRITE after reloading metadata")
	require.NoError(t, p.init.ReleaseXferReq(req))
}

func TestNativeLoadGarbageMetadata(t *testing.T) {
	a := newUCXAgent(t, testName(t), Config{})
	for _, md := range [][]byte{nil, []byte("not metadata"), make([]byte, 100)} {
		_, err := a.LoadRemoteMD(md)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "nixlAgent::loadRemoteMD")
	}
}

// TestNativeListenerMetadata exchanges metadata through NIXL's own listener
// threads: SendLocalMD, FetchRemoteMD, SendLocalPartialMD, InvalidateLocalMD.
func TestNativeListenerMetadata(t *testing.T) {
	portA, portB := freePort(t), freePort(t)
	a := newUCXAgent(t, testName(t)+".a", Config{ListenThread: true, ListenPort: uint16(portA)})
	b := newUCXAgent(t, testName(t)+".b", Config{ListenThread: true, ListenPort: uint16(portB)})
	bufA := newBuffer(t, 4096, 0x41)
	bufB := newBuffer(t, 4096, 0)
	require.NoError(t, a.RegisterMem(regDRAM(bufA), nil))
	require.NoError(t, b.RegisterMem(regDRAM(bufB), nil))
	toB := &Options{IPAddr: "127.0.0.1", Port: portB}
	toA := &Options{IPAddr: "127.0.0.1", Port: portA}

	// a pulls b's metadata.
	require.NoError(t, a.FetchRemoteMD(b.Name(), toB))
	eventually(t, "a has b's metadata", func() bool {
		return a.CheckRemoteMD(b.Name(), dram(bufB.Desc(0, 4096))) == nil
	}, a, b)

	// a pushes its metadata to b.
	require.NoError(t, a.SendLocalMD(toB))
	eventually(t, "b has a's metadata", func() bool {
		return b.CheckRemoteMD(a.Name(), dram(bufA.Desc(0, 4096))) == nil
	}, a, b)

	p := &peers{t: t, init: a, target: b, received: map[*NativeAgent]Notifs{}}
	req, err := a.CreateXferReq(Write, dram(bufA.Desc(0, 4096)), dram(bufB.Desc(0, 4096)), b.Name(), NotifOptions([]byte("via listener")))
	require.NoError(t, err)
	p.run(req, nil)
	require.NoError(t, a.ReleaseXferReq(req))
	requireBytes(t, pattern(4096, 0x41), bufB.Bytes(), "WRITE after listener exchange")
	assert.Equal(t, [][]byte{[]byte("via listener")}, p.waitNotifs(b, a.Name(), 1))

	// b tells a to forget it, then sends partial metadata (connection info only).
	require.NoError(t, b.InvalidateLocalMD(toA))
	eventually(t, "a forgot b", func() bool {
		return StatusOf(a.CheckRemoteMD(b.Name(), XferList{Mem: DRAM})) == StatusNotFound
	}, a, b)
	require.NoError(t, b.SendLocalPartialMD(RegList{Mem: DRAM}, toA))
	eventually(t, "a knows b again", func() bool {
		return a.CheckRemoteMD(b.Name(), XferList{Mem: DRAM}) == nil
	}, a, b)
	require.ErrorIs(t, a.CheckRemoteMD(b.Name(), dram(bufB.Desc(0, 4096))), ErrNotFound, "partial metadata had no memory")
}

func TestNativeListenerOptionsNeedAnAddress(t *testing.T) {
	a := newUCXAgent(t, testName(t), Config{})
	// No listener address and no metadata server configured.
	for name, err := range map[string]error{
		"SendLocalMD":   a.SendLocalMD(nil),
		"FetchRemoteMD": a.FetchRemoteMD("peer", nil),
		"InvalidateMD":  a.InvalidateLocalMD(nil),
	} {
		assert.Error(t, err, name)
	}
	assert.ErrorIs(t, a.SendLocalMD(&Options{IPAddr: "127.0.0.1", Port: 70000}), ErrInvalidParam)
}
