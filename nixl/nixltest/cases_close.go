package nixltest

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// testCloseWhilePolling: Close while another goroutine polls the agent
// returns, the poller then gets nixl.ErrClosed, Close is idempotent, and
// every method fails with nixl.ErrClosed afterwards.
func testCloseWhilePolling(e *env) {
	a, b, src, dst := e.linked("closing", "peer", 4096, 1, 0)
	h, err := a.CreateXferReq(nixl.Write, xferList(src.Desc(0, 4096)), xferList(dst.Desc(0, 4096)), b.Name(), nil)
	e.noErr(err, "CreateXferReq")
	e.complete(a, h, nil)

	var polls atomic.Int64
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := a.GetNotifs(nil); err != nil {
				done <- err
				return
			}
			if _, err := a.XferStatus(h); err != nil {
				done <- err
				return
			}
			polls.Add(1)
		}
	}()
	deadline := time.Now().Add(waitLimit)
	for polls.Load() < 20 {
		if time.Now().After(deadline) {
			e.t.Fatalf("the poller made %d polls in %v", polls.Load(), waitLimit)
		}
		time.Sleep(pollPause)
	}
	e.noErr(a.Close(), "Close while another goroutine polls")
	select {
	case err := <-done:
		if !errors.Is(err, nixl.ErrClosed) {
			e.t.Errorf("the poller stopped with %s, want nixl.ErrClosed", describe(err))
		}
	case <-time.After(waitLimit):
		e.t.Fatalf("the poller still runs %v after Close", waitLimit)
	}
	e.noErr(a.Close(), "Close twice")
	if a.Name() == "" {
		e.t.Error("Name is empty after Close")
	}

	mdB, err := b.LocalMD()
	e.noErr(err, "b.LocalMD")
	one := xferList(src.Desc(0, 64))
	calls := map[string]func() error{
		"RegisterMem":        func() error { return a.RegisterMem(regList(src), nil) },
		"DeregisterMem":      func() error { return a.DeregisterMem(regList(src), nil) },
		"LocalMD":            func() error { _, err := a.LocalMD(); return err },
		"LocalPartialMD":     func() error { _, err := a.LocalPartialMD(nixl.RegList{Mem: nixl.DRAM}, nil); return err },
		"LoadRemoteMD":       func() error { _, err := a.LoadRemoteMD(mdB); return err },
		"InvalidateRemoteMD": func() error { return a.InvalidateRemoteMD(b.Name()) },
		"CheckRemoteMD":      func() error { return a.CheckRemoteMD(b.Name(), nixl.XferList{Mem: nixl.DRAM}) },
		"PrepXferDlist":      func() error { _, err := a.PrepXferDlist("", one, nil); return err },
		"ReleaseDlistHandle": func() error { return a.ReleaseDlistHandle(1) },
		"MakeXferReq": func() error {
			_, err := a.MakeXferReq(nixl.Write, 1, []int{0}, 2, []int{0}, nil)
			return err
		},
		"CreateXferReq": func() error {
			_, err := a.CreateXferReq(nixl.Write, one, xferList(dst.Desc(0, 64)), b.Name(), nil)
			return err
		},
		"PostXferReq":    func() error { _, err := a.PostXferReq(h, nil); return err },
		"XferStatus":     func() error { _, err := a.XferStatus(h); return err },
		"ReleaseXferReq": func() error { return a.ReleaseXferReq(h) },
		"GetNotifs":      func() error { _, err := a.GetNotifs(nil); return err },
		"GenNotif":       func() error { return a.GenNotif(b.Name(), []byte("x"), nil) },
	}
	for name, call := range calls {
		e.wantErr(call(), nixl.ErrClosed, name+" after Close")
	}

	// The peer is unharmed.
	if _, err := b.GetNotifs(nil); err != nil {
		e.t.Errorf("peer's GetNotifs after the other agent closed: %s", describe(err))
	}
}
