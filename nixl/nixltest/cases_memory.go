package nixltest

import (
	"github.com/gonixl/gonixl/nixl"
)

// testRegistration: memory registers and deregisters exactly; a failed
// deregistration changes nothing.
func testRegistration(e *env) {
	a := e.agent("a")
	b1, b2, b3 := e.buffer(64<<10, 1), e.buffer(4096, 2), e.buffer(4096, 3)

	e.noErr(a.RegisterMem(regList(b1), nil), "register one buffer")
	e.noErr(a.RegisterMem(regList(b2, b3), nil), "register two buffers in one call")
	e.noErr(a.DeregisterMem(regList(b2, b3), nil), "deregister both in one call")
	e.wantErr(a.DeregisterMem(regList(b2), nil), nixl.ErrNotFound, "deregister a buffer again")

	sub := nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{{Desc: b1.Desc(0, 4096)}}}
	e.wantErr(a.DeregisterMem(sub, nil), nixl.ErrNotFound, "deregister part of a registered buffer")
	e.wantErr(a.DeregisterMem(regList(b1, b2), nil), nixl.ErrNotFound, "deregister a registered and an unregistered buffer")
	// The failed calls above must have left b1 registered.
	e.noErr(a.DeregisterMem(regList(b1), nil), "deregister b1 after failed deregistrations")
	e.wantErr(a.DeregisterMem(regList(b1), nil), nixl.ErrNotFound, "deregister with nothing registered")

	e.noErr(a.RegisterMem(regList(b1), nil), "register b1 again")
	e.noErr(a.DeregisterMem(regList(b1), nil), "deregister b1 again")
}

// testMetadataExchange: full metadata loads, is idempotent, and describes
// exactly the registered memory; bad blobs are refused without harm.
func testMetadataExchange(e *env) {
	a, b := e.agent("a"), e.agent("b")
	bufA, bufB := e.buffer(64<<10, 1), e.buffer(64<<10, 2)
	e.register(a, bufA)
	e.register(b, bufB)

	mdA, err := a.LocalMD()
	e.noErr(err, "a.LocalMD")
	if len(mdA) == 0 {
		e.t.Fatal("a.LocalMD returned no bytes")
	}
	for i := 0; i < 2; i++ {
		name, err := b.LoadRemoteMD(mdA)
		e.noErr(err, "b.LoadRemoteMD(a's metadata)")
		if name != a.Name() {
			e.t.Fatalf("LoadRemoteMD returned %q, want %q", name, a.Name())
		}
	}

	e.noErr(b.CheckRemoteMD(a.Name(), nixl.XferList{Mem: nixl.DRAM}), "CheckRemoteMD with no descriptors")
	e.noErr(b.CheckRemoteMD(a.Name(), xferList(bufA.Desc(0, uint64(bufA.Len())))), "CheckRemoteMD of a's whole buffer")
	e.noErr(b.CheckRemoteMD(a.Name(), xferList(bufA.Desc(100, 1000))), "CheckRemoteMD of a range inside a's buffer")
	beyond := bufA.Desc(uint64(bufA.Len())-10, 20)
	e.wantErr(b.CheckRemoteMD(a.Name(), xferList(beyond)), nixl.ErrNotFound, "CheckRemoteMD of a range past the end of a's buffer")
	e.wantErr(b.CheckRemoteMD(a.Name(), xferList(bufB.Desc(0, 64))), nixl.ErrNotFound, "CheckRemoteMD of memory a did not register")
	e.wantErr(b.CheckRemoteMD(a.Name()+".nobody", nixl.XferList{Mem: nixl.DRAM}), nixl.ErrNotFound, "CheckRemoteMD of an unknown agent")

	_, err = b.LoadRemoteMD([]byte("this is not agent metadata"))
	e.wantErr(err, nixl.ErrMismatch, "LoadRemoteMD of garbage")
	mdB, err := b.LocalMD()
	e.noErr(err, "b.LocalMD")
	_, err = b.LoadRemoteMD(mdB)
	e.wantErr(err, nixl.ErrInvalidParam, "LoadRemoteMD of the agent's own metadata")

	e.noErr(b.CheckRemoteMD(a.Name(), xferList(bufA.Desc(0, 64))), "CheckRemoteMD after refused loads")
}

// testPartialMetadata: partial metadata adds connection info and regions
// step by step, and a transfer into memory known only from partial
// metadata works.
func testPartialMetadata(e *env) {
	a, b := e.agent("a"), e.agent("b")
	buf1, buf2, bufB := e.buffer(16<<10, 0), e.buffer(16<<10, 0), e.buffer(16<<10, 9)
	e.register(a, buf1)
	e.register(a, buf2)
	e.register(b, bufB)
	e.load(a, b)

	_, err := a.LocalPartialMD(regList(bufB), nil)
	e.wantErr(err, nixl.ErrNotFound, "LocalPartialMD of memory the agent did not register")
	p1, err := a.LocalPartialMD(regList(buf1), nil)
	e.noErr(err, "LocalPartialMD(buf1)")
	p2, err := a.LocalPartialMD(regList(buf2), &nixl.Options{IncludeConnInfo: true})
	if viaCAPI {
		// The C API has no includeConnInfo: refused before NIXL is called.
		e.wantErr(err, nixl.ErrNotSupported, "LocalPartialMD(buf2, IncludeConnInfo) over the C API")
		p2, err = a.LocalPartialMD(regList(buf2), nil)
		e.noErr(err, "LocalPartialMD(buf2)")
	} else {
		e.noErr(err, "LocalPartialMD(buf2, IncludeConnInfo)")
		testPartialWithConnInfo(e, a, buf1, buf2, p1, p2)
	}

	conn, err := a.LocalPartialMD(nixl.RegList{Mem: nixl.DRAM}, nil)
	e.noErr(err, "LocalPartialMD with no descriptors (connection info only)")
	name, err := b.LoadRemoteMD(conn)
	e.noErr(err, "load connection-only metadata")
	if name != a.Name() {
		e.t.Fatalf("LoadRemoteMD returned %q, want %q", name, a.Name())
	}
	e.noErr(b.CheckRemoteMD(a.Name(), nixl.XferList{Mem: nixl.DRAM}), "CheckRemoteMD after connection-only metadata")
	e.wantErr(b.CheckRemoteMD(a.Name(), xferList(buf1.Desc(0, 64))), nixl.ErrNotFound, "CheckRemoteMD of a region not yet described")
	e.noErr(b.GenNotif(a.Name(), []byte("conn-only"), nil), "GenNotif with connection-only metadata")
	if got := e.notifs(a, b.Name(), 1); string(got[0]) != "conn-only" {
		e.t.Errorf("a got %q, want [conn-only]", strs(got))
	}

	_, err = b.LoadRemoteMD(p1)
	e.noErr(err, "load partial metadata of buf1")
	e.noErr(b.CheckRemoteMD(a.Name(), xferList(buf1.Desc(0, uint64(buf1.Len())))), "CheckRemoteMD(buf1) after loading it")
	e.wantErr(b.CheckRemoteMD(a.Name(), xferList(buf2.Desc(0, 64))), nixl.ErrNotFound, "CheckRemoteMD(buf2) before loading it")

	_, err = b.LoadRemoteMD(p2)
	e.noErr(err, "load partial metadata of buf2")
	e.noErr(b.CheckRemoteMD(a.Name(), xferList(buf2.Desc(0, uint64(buf2.Len())))), "CheckRemoteMD(buf2) after loading it")
	e.noErr(b.CheckRemoteMD(a.Name(), xferList(buf1.Desc(0, 64))), "buf1 still known after loading buf2")

	h, err := b.CreateXferReq(nixl.Write, xferList(bufB.Desc(0, 8192)), xferList(buf2.Desc(4096, 8192)), a.Name(), nixl.NotifOptions([]byte("partial")))
	e.noErr(err, "CreateXferReq into memory known from partial metadata")
	e.complete(b, h, nil)
	e.sameBytes(buf2.Bytes()[4096:4096+8192], bufB.Bytes()[:8192], "buf2 after WRITE")
	if got := e.notifs(a, b.Name(), 1); string(got[0]) != "partial" {
		e.t.Errorf("a got %q, want [partial]", strs(got))
	}
	e.noErr(b.ReleaseXferReq(h), "ReleaseXferReq")
}

// testPartialWithConnInfo: regions without connection info cannot be loaded
// before the connection info (UCX needs the connection to unpack their
// keys); the failed load leaves nothing behind. IncludeConnInfo (p2) makes a
// partial blob loadable on its own.
func testPartialWithConnInfo(e *env, a nixl.Agent, buf1, buf2 *nixl.Buffer, p1, p2 []byte) {
	c := e.agent("c")
	_, err := c.LoadRemoteMD(p1)
	e.wantErr(err, nil, "loading partial metadata without connection info first")
	e.wantErr(c.CheckRemoteMD(a.Name(), nixl.XferList{Mem: nixl.DRAM}), nixl.ErrNotFound, "CheckRemoteMD after the refused load")
	_, err = c.LoadRemoteMD(p2)
	e.noErr(err, "loading partial metadata with connection info")
	e.noErr(c.CheckRemoteMD(a.Name(), xferList(buf2.Desc(0, 64))), "CheckRemoteMD(buf2) from metadata with connection info")
	e.wantErr(c.CheckRemoteMD(a.Name(), xferList(buf1.Desc(0, 64))), nixl.ErrNotFound, "CheckRemoteMD(buf1), which was never loaded")
	_, err = c.LoadRemoteMD(p1)
	e.noErr(err, "loading partial metadata without connection info after it")
	e.noErr(c.CheckRemoteMD(a.Name(), xferList(buf1.Desc(0, 64))), "CheckRemoteMD(buf1) after loading it")
}
