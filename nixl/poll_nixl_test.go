//go:build nixl

package nixl

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// post posts req without waiting (peers.run waits, and its polling would
// take the notifications these tests look for).
func post(t *testing.T, a *NativeAgent, req XferHandle) {
	t.Helper()
	s, err := a.PostXferReq(req, nil)
	require.NoError(t, err)
	require.Contains(t, []Status{StatusSuccess, StatusInProgress}, s)
}

// pollPeers makes k 1 KiB WRITE requests from init to target, request i
// writing slot i with notification "m<i>".
func pollPeers(t *testing.T, k int, cfg Config) (*peers, []XferHandle) {
	const slot = 1024
	p := newPeers(t, k*slot, cfg)
	reqs := make([]XferHandle, k)
	for i := range reqs {
		off := uint64(i * slot)
		req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(off, slot)), dram(p.tgtBuf.Desc(off, slot)),
			p.target.Name(), NotifOptions(fmt.Appendf(nil, "m%d", i)))
		require.NoError(t, err)
		t.Cleanup(func() { p.init.ReleaseXferReq(req) })
		reqs[i] = req
	}
	return p, reqs
}

func TestNativePollStatusesAndNotifs(t *testing.T) {
	p, reqs := pollPeers(t, 3, Config{})
	for _, req := range reqs {
		post(t, p.init, req)
	}
	statuses := make([]Status, len(reqs))
	inbox := Notifs{"earlier": {[]byte("kept")}}
	eventually(t, "three transfers done and three notifications seen", func() bool {
		require.NoError(t, p.init.Poll(reqs, statuses, nil))
		require.NoError(t, p.target.Poll(nil, nil, inbox))
		for _, s := range statuses {
			require.Contains(t, []Status{StatusSuccess, StatusInProgress}, s)
		}
		return statuses[0] == StatusSuccess && statuses[1] == StatusSuccess && statuses[2] == StatusSuccess &&
			len(inbox[p.init.Name()]) == 3
	})
	requireBytes(t, p.initBuf.Bytes(), p.tgtBuf.Bytes(), "destination")
	assert.Len(t, inbox, 2)
	assert.Equal(t, [][]byte{[]byte("kept")}, inbox["earlier"])
	assert.ElementsMatch(t, [][]byte{[]byte("m0"), []byte("m1"), []byte("m2")}, inbox[p.init.Name()])

	// The statuses are what XferStatus reports for the same requests.
	for i, req := range reqs {
		s, err := p.init.XferStatus(req)
		require.NoError(t, err)
		assert.Equal(t, s, statuses[i], "request %d", i)
	}
	// Nothing more arrived: the map is unchanged.
	require.NoError(t, p.target.Poll(nil, nil, inbox))
	assert.Len(t, inbox[p.init.Name()], 3)
}

func TestNativePollRequestsAndNotifsInOneCall(t *testing.T) {
	p, reqs := pollPeers(t, 1, Config{})
	// The target tells the initiator something while the initiator's own
	// WRITE is in flight: one Poll on the initiator returns both.
	require.NoError(t, p.target.GenNotif(p.init.Name(), []byte("HB:7"), nil))
	post(t, p.init, reqs[0])
	statuses := []Status{StatusUnknown}
	inbox, targetInbox := Notifs{}, Notifs{}
	eventually(t, "the WRITE done, the heartbeat seen by the initiator and the WRITE's notification by the target", func() bool {
		require.NoError(t, p.init.Poll(reqs, statuses, inbox))
		require.NoError(t, p.target.Poll(nil, nil, targetInbox))
		return statuses[0] == StatusSuccess && len(inbox[p.target.Name()]) == 1 && len(targetInbox[p.init.Name()]) == 1
	})
	assert.Equal(t, Notifs{p.target.Name(): {[]byte("HB:7")}}, inbox)
	assert.Equal(t, Notifs{p.init.Name(): {[]byte("m0")}}, targetInbox)
	requireBytes(t, p.initBuf.Bytes(), p.tgtBuf.Bytes(), "destination")
}

func TestNativePollBadInput(t *testing.T) {
	p, reqs := pollPeers(t, 2, Config{})
	released, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 8)), dram(p.tgtBuf.Desc(0, 8)), p.target.Name(), nil)
	require.NoError(t, err)
	require.NoError(t, p.init.ReleaseXferReq(released))
	foreign, err := p.target.CreateXferReq(Write, dram(p.tgtBuf.Desc(0, 8)), dram(p.initBuf.Desc(0, 8)), p.init.Name(), nil)
	require.NoError(t, err)
	defer p.target.ReleaseXferReq(foreign)

	for name, c := range map[string]struct {
		reqs []XferHandle
		msg  string
	}{
		"never made": {[]XferHandle{reqs[0], 987654321}, "request 1 of 2: transfer handle 987654321 is not live"},
		"released":   {[]XferHandle{released, reqs[1]}, fmt.Sprintf("request 0 of 2: transfer handle %d is not live", released)},
		"foreign":    {[]XferHandle{reqs[0], foreign}, fmt.Sprintf("request 1 of 2: transfer handle %d is not live", foreign)},
		"zero":       {[]XferHandle{0, reqs[0]}, "request 0 of 2: transfer handle 0 is not live"},
	} {
		statuses := []Status{77, 77}
		inbox := Notifs{}
		err := p.init.Poll(c.reqs, statuses, inbox)
		require.ErrorIs(t, err, ErrInvalidParam, name)
		assert.Contains(t, err.Error(), c.msg, name)
		assert.Contains(t, err.Error(), "nixlAgent::getXferStatus", name)
		assert.Equal(t, []Status{77, 77}, statuses, "%s: no status written", name)
		assert.Empty(t, inbox, name)
	}

	err = p.init.Poll(reqs, make([]Status, 1), nil)
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), "1 statuses for 2 requests")

	// Nothing to do is not an error, and touches nothing.
	require.NoError(t, p.init.Poll(nil, nil, nil))
	// The requests are still usable after the refused calls.
	p.run(reqs[0], nil)
	s, err := p.wait(reqs[0])
	require.NoError(t, err)
	assert.Equal(t, StatusSuccess, s)
}

func TestNativePollConcurrentWithDuplicates(t *testing.T) {
	// Under SyncRW Poll takes a read lock per handle: a handle listed twice
	// must not be locked twice, or a concurrent release could deadlock it.
	p, reqs := pollPeers(t, 2, Config{SyncMode: SyncRW})
	for _, req := range reqs {
		p.run(req, nil)
	}
	for _, req := range reqs {
		s, err := p.wait(req)
		require.NoError(t, err)
		require.Equal(t, StatusSuccess, s)
	}
	extra, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 8)), dram(p.tgtBuf.Desc(0, 8)), p.target.Name(), nil)
	require.NoError(t, err)
	list := []XferHandle{reqs[0], reqs[1], reqs[0], reqs[1]}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for g := range errs {
		wg.Go(func() {
			statuses := make([]Status, len(list))
			for range 200 {
				if err := p.init.Poll(list, statuses, nil); err != nil {
					errs[g] = err
					return
				}
				for i, s := range statuses {
					if s != StatusSuccess {
						errs[g] = fmt.Errorf("status %d is %v", i, s)
						return
					}
				}
			}
		})
	}
	require.NoError(t, p.init.ReleaseXferReq(extra))
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

func TestNativePollEachStatusesAndNotifs(t *testing.T) {
	p, reqs := pollPeers(t, 3, Config{})
	for _, req := range reqs {
		post(t, p.init, req)
	}
	statuses := make([]Status, len(reqs))
	var got [][]byte
	from := map[string]int{}
	each := func(sender string, msg []byte) {
		from[sender]++
		got = append(got, msg)
	}
	eventually(t, "three transfers done and three notifications seen", func() bool {
		require.NoError(t, p.init.PollEach(reqs, statuses, nil))
		require.NoError(t, p.target.PollEach(nil, nil, each))
		return statuses[0] == StatusSuccess && statuses[1] == StatusSuccess && statuses[2] == StatusSuccess && len(got) == 3
	})
	requireBytes(t, p.initBuf.Bytes(), p.tgtBuf.Bytes(), "destination")
	assert.Equal(t, map[string]int{p.init.Name(): 3}, from)
	assert.ElementsMatch(t, [][]byte{[]byte("m0"), []byte("m1"), []byte("m2")}, got)
	for i, req := range reqs {
		s, err := p.init.XferStatus(req)
		require.NoError(t, err)
		assert.Equal(t, s, statuses[i], "request %d", i)
	}

	// The messages are the caller's: later deliveries do not touch them.
	for i := range 40 {
		require.NoError(t, p.init.GenNotif(p.target.Name(), fmt.Appendf(nil, "later-%02d", i), nil))
	}
	var later []string
	eventually(t, "forty more notifications", func() bool {
		require.NoError(t, p.target.PollEach(nil, nil, func(_ string, msg []byte) { later = append(later, string(msg)) }))
		return len(later) == 40
	})
	assert.ElementsMatch(t, [][]byte{[]byte("m0"), []byte("m1"), []byte("m2")}, got)
	for i, m := range later {
		assert.Equal(t, fmt.Sprintf("later-%02d", i), m, "genNotif's messages arrive in the order sent")
	}
}

func TestNativePollEachBadInput(t *testing.T) {
	p, reqs := pollPeers(t, 2, Config{})
	require.NoError(t, p.target.GenNotif(p.init.Name(), []byte("waiting"), nil))
	called := 0
	each := func(string, []byte) { called++ }
	statuses := []Status{77, 77}
	err := p.init.PollEach([]XferHandle{reqs[0], 987654321}, statuses, each)
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), "request 1 of 2: transfer handle 987654321 is not live")
	assert.Equal(t, []Status{77, 77}, statuses, "no status written")

	err = p.init.PollEach(reqs, make([]Status, 1), each)
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), "1 statuses for 2 requests")
	require.NoError(t, p.init.PollEach(nil, nil, nil), "nothing to do")
	assert.Zero(t, called, "refused calls fetch no notifications")

	eventually(t, "the notification kept for a valid call", func() bool {
		require.NoError(t, p.init.PollEach(nil, nil, each))
		return called == 1
	}, p.target)
}

func TestNativePollEachPanicReleasesTheAgent(t *testing.T) {
	p, _ := pollPeers(t, 1, Config{})
	require.NoError(t, p.target.GenNotif(p.init.Name(), []byte("boom"), nil))
	panicked := func() (v any) {
		defer func() { v = recover() }()
		deadline := time.Now().Add(waitLimit)
		for time.Now().Before(deadline) {
			require.NoError(t, p.init.PollEach(nil, nil, func(string, []byte) { panic("from each") }))
			p.target.GetNotifs(nil)
		}
		return nil
	}()
	require.Equal(t, "from each", panicked)
	// The agent was released on the way out: its next calls neither
	// deadlock nor fail.
	n, err := p.init.GetNotifs(nil)
	require.NoError(t, err)
	assert.Empty(t, n, "the message that panicked was handed over once")
	require.NoError(t, p.init.Close())
	err = p.init.PollEach(nil, nil, func(string, []byte) {})
	require.ErrorIs(t, err, ErrClosed)
}
