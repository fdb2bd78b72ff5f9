//go:build nixl

package nixl

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNativeCloseWhileAnotherGoroutinePolls(t *testing.T) {
	p := newPeers(t, 1<<20, Config{})
	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 1<<20)), dram(p.tgtBuf.Desc(0, 1<<20)), p.target.Name(), nil)
	require.NoError(t, err)
	_, err = p.init.PostXferReq(req, nil)
	require.NoError(t, err)

	var wg sync.WaitGroup
	polls := make(chan error, 2)
	started := make(chan struct{}, 2)
	for _, poll := range []func() error{
		func() error { _, err := p.init.GetNotifs(nil); return err },
		func() error { _, err := p.init.XferStatus(req); return err },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			deadline := time.Now().Add(waitLimit)
			for time.Now().Before(deadline) {
				if err := poll(); err != nil {
					polls <- err
					return
				}
				p.target.GetNotifs(nil)
			}
			polls <- errors.New("still polling without error at the deadline")
		}()
	}
	<-started
	<-started
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, p.init.Close())
	wg.Wait()
	close(polls)
	for err := range polls {
		assert.ErrorIs(t, err, ErrClosed)
	}

	require.NoError(t, p.init.Close(), "Close is idempotent")
	assert.Equal(t, testName(t)+".init", p.init.Name(), "Name works after Close")
}

func TestNativeEveryMethodAfterClose(t *testing.T) {
	a := newUCXAgent(t, testName(t), Config{})
	require.NoError(t, a.Close())
	errs := map[string]error{
		"AvailPlugins":       second(a.AvailPlugins()),
		"CreateBackend":      a.CreateBackend("POSIX", nil),
		"RegisterMem":        a.RegisterMem(RegList{Mem: DRAM}, nil),
		"DeregisterMem":      a.DeregisterMem(RegList{Mem: DRAM}, nil),
		"QueryMem":           second(a.QueryMem(RegList{Mem: DRAM}, nil)),
		"LocalMD":            second(a.LocalMD()),
		"LocalPartialMD":     second(a.LocalPartialMD(RegList{Mem: DRAM}, nil)),
		"LoadRemoteMD":       second(a.LoadRemoteMD([]byte("x"))),
		"InvalidateRemoteMD": a.InvalidateRemoteMD("b"),
		"CheckRemoteMD":      a.CheckRemoteMD("b", XferList{}),
		"SendLocalMD":        a.SendLocalMD(nil),
		"SendLocalPartialMD": a.SendLocalPartialMD(RegList{}, nil),
		"FetchRemoteMD":      a.FetchRemoteMD("b", nil),
		"InvalidateLocalMD":  a.InvalidateLocalMD(nil),
		"MakeConnection":     a.MakeConnection("b", nil),
		"PrepXferDlist":      second(a.PrepXferDlist("", XferList{}, nil)),
		"ReleaseDlistHandle": a.ReleaseDlistHandle(1),
		"MakeXferReq":        second(a.MakeXferReq(Write, 1, nil, 2, nil, nil)),
		"CreateXferReq":      second(a.CreateXferReq(Write, XferList{}, XferList{}, "b", nil)),
		"EstimateXferCost":   second(a.EstimateXferCost(1, nil)),
		"PostXferReq":        second(a.PostXferReq(1, nil)),
		"XferStatus":         second(a.XferStatus(1)),
		"QueryXferBackend":   second(a.QueryXferBackend(1)),
		"XferTelemetry":      second(a.XferTelemetry(1)),
		"ReleaseXferReq":     a.ReleaseXferReq(1),
		"GetNotifs":          second(a.GetNotifs(nil)),
		"GenNotif":           a.GenNotif("b", nil, nil),
		"Poll":               a.Poll([]XferHandle{1}, make([]Status, 1), Notifs{}),
	}
	_, _, err := a.PluginParams("UCX")
	errs["PluginParams"] = err
	_, _, err = a.BackendParams("UCX")
	errs["BackendParams"] = err
	require.Len(t, errs, 30)
	for name, err := range errs {
		assert.ErrorIs(t, err, ErrClosed, name)
	}
}

func TestNativeCloseReleasesOpenHandles(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	_, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	require.NoError(t, err)
	_, err = p.init.PrepXferDlist("", dram(p.initBuf.Desc(0, 4096)), nil)
	require.NoError(t, err)
	require.Equal(t, 1, p.init.xfers.len())
	require.Equal(t, 1, p.init.dlists.len())
	require.NoError(t, p.init.Close())
	assert.Zero(t, p.init.xfers.len())
	assert.Zero(t, p.init.dlists.len())
}

func TestNativeConcurrentTransfers(t *testing.T) {
	for _, mode := range []ThreadSync{SyncNone, SyncRW} {
		t.Run(mode.String(), func(t *testing.T) {
			const workers, blk = 4, 16 << 10
			p := newPeers(t, workers*blk, Config{SyncMode: mode})
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					off := uint64(w * blk)
					req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(off, blk)), dram(p.tgtBuf.Desc(off, blk)), p.target.Name(), nil)
					if err != nil {
						errs <- err
						return
					}
					defer p.init.ReleaseXferReq(req)
					for range 20 {
						if _, err := p.init.PostXferReq(req, nil); err != nil {
							errs <- err
							return
						}
						deadline := time.Now().Add(waitLimit)
						for {
							s, err := p.init.XferStatus(req)
							if err != nil {
								errs <- err
								return
							}
							if s == StatusSuccess {
								break
							}
							if _, err := p.target.GetNotifs(nil); err != nil {
								errs <- err
								return
							}
							if time.Now().After(deadline) {
								errs <- errors.New("transfer timed out")
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			requireBytes(t, pattern(workers*blk, 0x11), p.tgtBuf.Bytes(), "all workers' blocks")
		})
	}
}
