package nixltest

import (
	"github.com/gonixl/gonixl/nixl"
)

// testDescriptorErrors: requests over memory that is not registered, ranges
// past a region's end, and mismatched lists are refused.
func testDescriptorErrors(e *env) {
	const size = 8192
	a, b := e.agent("initiator"), e.agent("target")
	src, gone, strayA := e.buffer(size, 1), e.buffer(size, 2), e.buffer(size, 3)
	dst, strayB := e.buffer(size, 0), e.buffer(size, 0)
	e.register(a, src, gone)
	e.register(b, dst)
	e.exchange(a, b)
	e.noErr(a.DeregisterMem(regList(gone), nil), "DeregisterMem(gone)")

	bad := []struct {
		what          string
		local, remote nixl.XferList
		want          error
	}{
		{"unregistered local memory", xferList(strayA.Desc(0, 512)), xferList(dst.Desc(0, 512)), nixl.ErrNotFound},
		{"deregistered local memory", xferList(gone.Desc(0, 512)), xferList(dst.Desc(0, 512)), nixl.ErrNotFound},
		{"local range past the region's end", xferList(src.Desc(size-256, 512)), xferList(dst.Desc(0, 512)), nixl.ErrNotFound},
		{"remote range past the region's end", xferList(src.Desc(0, 1024)), xferList(dst.Desc(size-512, 1024)), nixl.ErrNotFound},
		{"remote memory the target did not register", xferList(src.Desc(0, 512)), xferList(strayB.Desc(0, 512)), nixl.ErrNotFound},
		{"lists of different lengths", xferList(src.Desc(0, 512), src.Desc(512, 512)), xferList(dst.Desc(0, 512)), nixl.ErrInvalidParam},
		{"descriptors of different lengths", xferList(src.Desc(0, 1024)), xferList(dst.Desc(0, 512)), nixl.ErrInvalidParam},
	}
	for _, c := range bad {
		for _, op := range []nixl.XferOp{nixl.Write, nixl.Read} {
			h, err := a.CreateXferReq(op, c.local, c.remote, b.Name(), nil)
			e.wantErr(err, c.want, op.String()+" over "+c.what)
			if err == nil {
				e.noErr(a.ReleaseXferReq(h), "release the request that should not exist")
			}
		}
	}

	// The same agents still make good requests.
	h, err := a.CreateXferReq(nixl.Write, xferList(src.Desc(0, size)), xferList(dst.Desc(0, size)), b.Name(), nil)
	e.noErr(err, "CreateXferReq after refused ones")
	e.complete(a, h, nil)
	e.sameBytes(dst.Bytes(), src.Bytes(), "dst after WRITE")
	e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq")
}

// testUnknownRemote: every call naming an agent whose metadata was never
// loaded fails with NIXL_ERR_NOT_FOUND.
func testUnknownRemote(e *env) {
	a := e.agent("a")
	buf := e.buffer(4096, 1)
	e.register(a, buf)
	nobody := a.Name() + ".nobody"

	_, err := a.CreateXferReq(nixl.Write, xferList(buf.Desc(0, 64)), xferList(buf.Desc(64, 64)), nobody, nil)
	e.wantErr(err, nixl.ErrNotFound, "CreateXferReq to an unknown agent")
	_, err = a.PrepXferDlist(nobody, xferList(buf.Desc(0, 64)), nil)
	e.wantErr(err, nixl.ErrNotFound, "PrepXferDlist for an unknown agent")
	e.wantErr(a.GenNotif(nobody, []byte("hello"), nil), nixl.ErrNotFound, "GenNotif to an unknown agent")
	e.wantErr(a.CheckRemoteMD(nobody, nixl.XferList{Mem: nixl.DRAM}), nixl.ErrNotFound, "CheckRemoteMD of an unknown agent")
	e.wantErr(a.InvalidateRemoteMD(nobody), nixl.ErrNotFound, "InvalidateRemoteMD of an unknown agent")
}

// testInvalidation: after InvalidateRemoteMD the peer is unknown; requests
// made before a reload can no longer be posted; new ones work.
func testInvalidation(e *env) {
	const size = 8192
	a, b, src, dst := e.linked("initiator", "target", size, 4, 0)
	whole := func(buf *nixl.Buffer) nixl.XferList { return xferList(buf.Desc(0, size)) }

	old, err := a.CreateXferReq(nixl.Write, whole(src), whole(dst), b.Name(), nixl.NotifOptions([]byte("old")))
	e.noErr(err, "CreateXferReq before invalidation")
	e.noErr(a.InvalidateRemoteMD(b.Name()), "InvalidateRemoteMD")

	_, err = a.PostXferReq(old, nil)
	e.wantErr(err, nixl.ErrNotFound, "PostXferReq of a request to an invalidated agent")
	_, err = a.CreateXferReq(nixl.Write, whole(src), whole(dst), b.Name(), nil)
	e.wantErr(err, nixl.ErrNotFound, "CreateXferReq to an invalidated agent")
	e.wantErr(a.GenNotif(b.Name(), []byte("x"), nil), nixl.ErrNotFound, "GenNotif to an invalidated agent")
	e.wantErr(a.CheckRemoteMD(b.Name(), nixl.XferList{Mem: nixl.DRAM}), nixl.ErrNotFound, "CheckRemoteMD of an invalidated agent")
	e.wantErr(a.InvalidateRemoteMD(b.Name()), nixl.ErrNotFound, "InvalidateRemoteMD twice")
	e.wantErr(a.InvalidateRemoteMD(a.Name()), nixl.ErrInvalidParam, "InvalidateRemoteMD of the agent itself")

	e.load(a, b)
	_, err = a.PostXferReq(old, nil)
	e.wantErr(err, nixl.ErrNotFound, "PostXferReq of a request made before the metadata was reloaded")
	e.noErr(a.ReleaseXferReq(old), "ReleaseXferReq(old)")

	h, err := a.CreateXferReq(nixl.Write, whole(src), whole(dst), b.Name(), nixl.NotifOptions([]byte("new")))
	e.noErr(err, "CreateXferReq after reloading")
	e.complete(a, h, nil)
	e.sameBytes(dst.Bytes(), src.Bytes(), "dst after WRITE")
	if got := e.notifs(b, a.Name(), 1); string(got[0]) != "new" {
		e.t.Errorf("target got %q, want [new]: the old request never ran", strs(got))
	}
	e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq")
}

// testNotPosted: a request's status before its first post is
// NIXL_ERR_NOT_POSTED.
func testNotPosted(e *env) {
	a, b, src, dst := e.linked("initiator", "target", 4096, 1, 0)
	h, err := a.CreateXferReq(nixl.Write, xferList(src.Desc(0, 4096)), xferList(dst.Desc(0, 4096)), b.Name(), nil)
	e.noErr(err, "CreateXferReq")
	_, err = a.XferStatus(h)
	e.wantErr(err, nixl.ErrNotPosted, "XferStatus before PostXferReq")
	e.zero(dst.Bytes(), "dst of a request never posted")
	e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq of a request never posted")
}

// testReleaseTwice: releasing a request or a list twice, or using a
// released request, is an error, not a crash.
func testReleaseTwice(e *env) {
	a, b, src, dst := e.linked("initiator", "target", 4096, 1, 0)
	h, err := a.CreateXferReq(nixl.Write, xferList(src.Desc(0, 4096)), xferList(dst.Desc(0, 4096)), b.Name(), nil)
	e.noErr(err, "CreateXferReq")
	e.complete(a, h, nil)
	e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq")
	e.wantErr(a.ReleaseXferReq(h), nil, "ReleaseXferReq twice")
	_, err = a.XferStatus(h)
	e.wantErr(err, nil, "XferStatus of a released request")
	_, err = a.PostXferReq(h, nil)
	e.wantErr(err, nil, "PostXferReq of a released request")
	e.wantErr(a.ReleaseXferReq(0), nil, "ReleaseXferReq(0)")

	dl, err := a.PrepXferDlist("", xferList(src.Desc(0, 4096)), nil)
	e.noErr(err, "PrepXferDlist")
	e.noErr(a.ReleaseDlistHandle(dl), "ReleaseDlistHandle")
	e.wantErr(a.ReleaseDlistHandle(dl), nil, "ReleaseDlistHandle twice")
}
