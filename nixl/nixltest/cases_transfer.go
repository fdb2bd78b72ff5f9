package nixltest

import (
	"bytes"
	"fmt"
	"sort"
	"sync"

	"github.com/gonixl/gonixl/nixl"
)

// sameBytes fails the test unless got equals want, naming the first
// difference.
func (e *env) sameBytes(got, want []byte, what string) {
	e.t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		e.t.Errorf("%s: %d bytes, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if got[i] != want[i] {
			e.t.Errorf("%s: first difference at byte %d: %#02x, want %#02x", what, i, got[i], want[i])
			return
		}
	}
}

// zero fails the test unless every byte of p is zero.
func (e *env) zero(p []byte, what string) {
	e.t.Helper()
	for i, c := range p {
		if c != 0 {
			e.t.Errorf("%s: byte %d is %#02x, want untouched (0)", what, i, c)
			return
		}
	}
}

// scatter is a set of descriptor pairs that are neither contiguous nor in
// order, so an agent that ignores offsets or order is caught.
var scatter = []struct{ local, remote, n uint64 }{
	{0, 192 << 10, 16 << 10},
	{64 << 10, 0, 8 << 10},
	{128 << 10, 100<<10 + 123, 4093},
	{200 << 10, 40 << 10, 1},
}

// scatterLists returns the scatter pairs as a transfer's two sides: the
// local offsets into local, the remote offsets into remote.
func scatterLists(local, remote *nixl.Buffer) (nixl.XferList, nixl.XferList) {
	l, r := nixl.XferList{Mem: nixl.DRAM}, nixl.XferList{Mem: nixl.DRAM}
	for _, s := range scatter {
		l.Descs = append(l.Descs, local.Desc(s.local, s.n))
		r.Descs = append(r.Descs, remote.Desc(s.remote, s.n))
	}
	return l, r
}

// testWrite: WRITE copies exactly the described bytes into the target and
// then notifies it.
func testWrite(e *env) {
	a, b, src, dst := e.linked("initiator", "target", 256<<10, 7, 0)

	local, remote := scatterLists(src, dst)
	h, err := a.CreateXferReq(nixl.Write, local, remote, b.Name(), nixl.NotifOptions([]byte("write-done")))
	e.noErr(err, "CreateXferReq(WRITE)")
	e.complete(a, h, nil)

	want := make([]byte, dst.Len())
	for _, s := range scatter {
		copy(want[s.remote:s.remote+s.n], src.Bytes()[s.local:s.local+s.n])
	}
	e.sameBytes(dst.Bytes(), want, "target buffer after WRITE")
	if got := e.notifs(b, a.Name(), 1); string(got[0]) != "write-done" {
		e.t.Errorf("target got %q, want [write-done]", strs(got))
	}
	for i := 0; i < 3; i++ {
		if st, err := a.XferStatus(h); err != nil || st != nixl.StatusSuccess {
			e.t.Errorf("XferStatus after success: %v, %s; want success again", st, describe(err))
		}
	}
	e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq")
	if p := e.pending(a); p.Count() != 0 {
		e.t.Errorf("initiator received %v; a WRITE notifies only the target", p)
	}
}

// testRead: READ copies the target's bytes into the initiator and notifies
// the target.
func testRead(e *env) {
	a, b, dst, src := e.linked("initiator", "target", 256<<10, 0, 11)

	local, remote := scatterLists(dst, src)
	h, err := a.CreateXferReq(nixl.Read, local, remote, b.Name(), nixl.NotifOptions([]byte("read-done")))
	e.noErr(err, "CreateXferReq(READ)")
	e.complete(a, h, nil)

	want := make([]byte, dst.Len())
	for _, s := range scatter {
		copy(want[s.local:s.local+s.n], src.Bytes()[s.remote:s.remote+s.n])
	}
	e.sameBytes(dst.Bytes(), want, "initiator buffer after READ")
	e.sameBytes(src.Bytes(), pattern(src.Len(), 11), "target buffer after READ (must be unchanged)")
	if got := e.notifs(b, a.Name(), 1); string(got[0]) != "read-done" {
		e.t.Errorf("target got %q, want [read-done]", strs(got))
	}
	e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq")
}

// blocks returns n descriptors of size bytes each, back to back in buf.
func blocks(buf *nixl.Buffer, n int, size uint64) nixl.XferList {
	l := nixl.XferList{Mem: nixl.DRAM}
	for i := 0; i < n; i++ {
		l.Descs = append(l.Descs, buf.Desc(uint64(i)*size, size))
	}
	return l
}

// testPreparedLists: MakeXferReq pairs prepared entries by index, in any
// order, consecutive or not.
func testPreparedLists(e *env) {
	const n, size = 8, 4096
	a, b, src, dst := e.linked("initiator", "target", n*size, 3, 0)

	lh, err := a.PrepXferDlist("", blocks(src, n, size), nil)
	e.noErr(err, "PrepXferDlist(local)")
	rh, err := a.PrepXferDlist(b.Name(), blocks(dst, n, size), nil)
	e.noErr(err, "PrepXferDlist(remote)")

	li, ri := make([]int, n), make([]int, n)
	for i := range li {
		li[i], ri[i] = i, n-1-i
	}
	h1, err := a.MakeXferReq(nixl.Write, lh, li, rh, ri, nixl.NotifOptions([]byte("reversed")))
	e.noErr(err, "MakeXferReq(reversed)")
	e.complete(a, h1, nil)
	h2, err := a.MakeXferReq(nixl.Write, lh, []int{0, 1, 2, 3}, rh, []int{4, 5, 6, 7}, nixl.NotifOptions([]byte("consecutive")))
	e.noErr(err, "MakeXferReq(consecutive)")
	e.complete(a, h2, nil)

	s, d := src.Bytes(), dst.Bytes()
	for j := 0; j < n; j++ {
		from := n - 1 - j // block j of dst came from src block n-1-j ...
		if j >= 4 {
			from = j - 4 // ... except blocks 4..7, overwritten from src 0..3
		}
		e.sameBytes(d[j*size:(j+1)*size], s[from*size:(from+1)*size], fmt.Sprintf("dst block %d", j))
	}
	got := e.notifs(b, a.Name(), 2)
	if string(got[0]) != "reversed" || string(got[1]) != "consecutive" {
		e.t.Errorf("target got %q, want [reversed consecutive]", strs(got))
	}
	e.noErr(a.ReleaseXferReq(h1), "ReleaseXferReq(h1)")
	e.noErr(a.ReleaseXferReq(h2), "ReleaseXferReq(h2)")
	e.noErr(a.ReleaseDlistHandle(lh), "ReleaseDlistHandle(local)")
	e.noErr(a.ReleaseDlistHandle(rh), "ReleaseDlistHandle(remote)")
}

// testPreparedListErrors: bad index lists and bad prepared lists are
// refused with NIXL's statuses.
func testPreparedListErrors(e *env) {
	const size = 4096
	a, b := e.agent("initiator"), e.agent("target")
	src, dst, stray := e.buffer(4*size, 1), e.buffer(4*size, 0), e.buffer(size, 0)
	e.register(a, src)
	e.register(b, dst)
	e.exchange(a, b)

	lh, err := a.PrepXferDlist("", blocks(src, 4, size), nil)
	e.noErr(err, "PrepXferDlist(local)")
	rh, err := a.PrepXferDlist(b.Name(), blocks(dst, 4, size), nil)
	e.noErr(err, "PrepXferDlist(remote)")
	small, err := a.PrepXferDlist("", blocks(src, 2, size/2), nil)
	e.noErr(err, "PrepXferDlist(local, half-size blocks)")

	bad := []struct {
		what       string
		local      nixl.DlistHandle
		li         []int
		remote     nixl.DlistHandle
		ri         []int
		wantStatus error
	}{
		{"index lists of different lengths", lh, []int{0, 1, 2}, rh, []int{0, 1}, nixl.ErrInvalidParam},
		{"empty index lists", lh, []int{}, rh, []int{}, nixl.ErrInvalidParam},
		{"local index past the end", lh, []int{4}, rh, []int{0}, nixl.ErrInvalidParam},
		{"remote index past the end", lh, []int{0}, rh, []int{9}, nixl.ErrInvalidParam},
		{"negative local index", lh, []int{-1}, rh, []int{0}, nixl.ErrInvalidParam},
		{"sides swapped", rh, []int{0}, lh, []int{0}, nixl.ErrInvalidParam},
		{"entries of different lengths", small, []int{0}, rh, []int{0}, nixl.ErrInvalidParam},
	}
	for _, c := range bad {
		h, err := a.MakeXferReq(nixl.Write, c.local, c.li, c.remote, c.ri, nil)
		e.wantErr(err, c.wantStatus, "MakeXferReq with "+c.what)
		if err == nil {
			e.noErr(a.ReleaseXferReq(h), "release the request that should not exist")
		}
	}

	_, err = a.PrepXferDlist(b.Name()+".nobody", blocks(dst, 1, size), nil)
	e.wantErr(err, nixl.ErrNotFound, "PrepXferDlist for an unknown agent")
	_, err = a.PrepXferDlist("", blocks(stray, 1, size), nil)
	e.wantErr(err, nixl.ErrNotFound, "PrepXferDlist of unregistered local memory")
	_, err = a.PrepXferDlist(b.Name(), xferList(dst.Desc(3*size, 2*size)), nil)
	e.wantErr(err, nixl.ErrNotFound, "PrepXferDlist of a range past the end of the target's buffer")

	e.noErr(a.ReleaseDlistHandle(small), "ReleaseDlistHandle")
	e.wantErr(a.ReleaseDlistHandle(small), nil, "ReleaseDlistHandle twice")
	_, err = a.MakeXferReq(nixl.Write, small, []int{0}, rh, []int{0}, nil)
	e.wantErr(err, nil, "MakeXferReq with a released list")
	e.noErr(a.ReleaseDlistHandle(lh), "ReleaseDlistHandle(local)")
	e.noErr(a.ReleaseDlistHandle(rh), "ReleaseDlistHandle(remote)")
}

// testRepost: a completed request can be posted again; a post's
// notification replaces the request's for this and later posts, and options
// without one keep it.
func testRepost(e *env) {
	const size = 16 << 10
	a, b, src, dst := e.linked("initiator", "target", size, 1, 0)

	h, err := a.CreateXferReq(nixl.Write, blocks(src, 1, size), blocks(dst, 1, size), b.Name(), nixl.NotifOptions([]byte("first")))
	e.noErr(err, "CreateXferReq")
	e.complete(a, h, nil)
	e.sameBytes(dst.Bytes(), pattern(size, 1), "dst after the first post")
	if got := e.notifs(b, a.Name(), 1); string(got[0]) != "first" {
		e.t.Errorf("target got %q, want [first]", strs(got))
	}

	fill(src.Bytes(), 2)
	e.complete(a, h, nixl.NotifOptions([]byte("second")))
	e.sameBytes(dst.Bytes(), pattern(size, 2), "dst after the second post")
	if got := e.notifs(b, a.Name(), 1); string(got[0]) != "second" {
		e.t.Errorf("target got %q, want [second]: the post's notification replaces the request's", strs(got))
	}

	fill(src.Bytes(), 3)
	e.complete(a, h, &nixl.Options{})
	e.sameBytes(dst.Bytes(), pattern(size, 3), "dst after the third post")
	if got := e.notifs(b, a.Name(), 1); string(got[0]) != "second" {
		e.t.Errorf("target got %q, want [second]: options without a notification keep the last one", strs(got))
	}
	e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq")
}

// testConcurrentTransfers: many goroutines post and wait at once, WRITE and
// READ mixed; every byte and every notification arrives.
func testConcurrentTransfers(e *env) {
	const workers, per, size = 8, 16, 4096
	const total = workers * per
	a, b := e.agent("initiator"), e.agent("target")
	srcA, dstA := e.buffer(total*size, 5), e.buffer(total*size, 0)
	srcB, dstB := e.buffer(total*size, 6), e.buffer(total*size, 0)
	e.register(a, srcA, dstA)
	e.register(b, srcB, dstB)
	e.exchange(a, b)

	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < per; j++ {
				i := uint64(w*per + j)
				op, local, remote := nixl.Write, srcA.Desc(i*size, size), dstB.Desc(i*size, size)
				if j%2 == 1 {
					op, local, remote = nixl.Read, dstA.Desc(i*size, size), srcB.Desc(i*size, size)
				}
				msg := fmt.Sprintf("%v-%03d", op, i)
				h, err := a.CreateXferReq(op, xferList(local), xferList(remote), b.Name(), nixl.NotifOptions([]byte(msg)))
				if err != nil {
					e.t.Errorf("%s: CreateXferReq: %s", msg, describe(err))
					return
				}
				if _, err := a.PostXferReq(h, nil); err != nil {
					e.t.Errorf("%s: PostXferReq: %s", msg, describe(err))
					return
				}
				if st, err := e.waitFor(a, h); err != nil || st != nixl.StatusSuccess {
					e.t.Errorf("%s: ended with %v, %s", msg, st, describe(err))
					return
				}
				if err := a.ReleaseXferReq(h); err != nil {
					e.t.Errorf("%s: ReleaseXferReq: %s", msg, describe(err))
				}
			}
		}()
	}
	wg.Wait()
	if e.t.Failed() {
		return
	}

	var want []string
	for i := 0; i < total; i++ {
		lo, hi := i*size, (i+1)*size
		if i%per%2 == 0 {
			want = append(want, fmt.Sprintf("%v-%03d", nixl.Write, i))
			e.sameBytes(dstB.Bytes()[lo:hi], srcA.Bytes()[lo:hi], fmt.Sprintf("WRITE block %d", i))
			e.zero(dstA.Bytes()[lo:hi], fmt.Sprintf("dstA block %d (no READ targets it)", i))
		} else {
			want = append(want, fmt.Sprintf("%v-%03d", nixl.Read, i))
			e.sameBytes(dstA.Bytes()[lo:hi], srcB.Bytes()[lo:hi], fmt.Sprintf("READ block %d", i))
			e.zero(dstB.Bytes()[lo:hi], fmt.Sprintf("dstB block %d (no WRITE targets it)", i))
		}
	}
	got := strs(e.notifs(b, a.Name(), total))
	sort.Strings(got)
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Errorf("target's notifications differ from the transfers':\n got %q\nwant %q", got, want)
	}
	if p := e.pending(b); p.Count() != 0 {
		e.t.Errorf("target has %d notifications more than transfers: %v", p.Count(), p)
	}
}

// testListsCopied: CreateXferReq copies the caller's descriptor lists, so a
// caller may reuse them at once (the connectors map every request into the
// same scratch lists). The request must move what the lists said when it
// was created, not what they say when it is posted.
func testListsCopied(e *env) {
	a, b, src, dst := e.linked("initiator", "target", 256<<10, 7, 0)

	local, remote := scatterLists(src, dst)
	h, err := a.CreateXferReq(nixl.Write, local, remote, b.Name(), nixl.NotifOptions([]byte("copied")))
	e.noErr(err, "CreateXferReq(WRITE)")
	for i := range local.Descs { // point every pair at the start of both buffers
		local.Descs[i] = src.Desc(0, local.Descs[i].Len)
		remote.Descs[i] = dst.Desc(0, remote.Descs[i].Len)
	}
	e.complete(a, h, nil)

	want := make([]byte, dst.Len())
	for _, s := range scatter {
		copy(want[s.remote:s.remote+s.n], src.Bytes()[s.local:s.local+s.n])
	}
	e.sameBytes(dst.Bytes(), want, "target buffer after WRITE with reused lists")
	if got := e.notifs(b, a.Name(), 1); string(got[0]) != "copied" {
		e.t.Errorf("target got %q, want [copied]", strs(got))
	}
	e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq")
}
