//go:build nixl

package nixl

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNativeNotificationCarriesExactMessage(t *testing.T) {
	p := newPeers(t, 8192, Config{})
	msg := []byte("req-42:2")
	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 8192)), dram(p.tgtBuf.Desc(0, 8192)), p.target.Name(), NotifOptions(msg))
	require.NoError(t, err)
	defer p.init.ReleaseXferReq(req)
	p.run(req, nil)

	got := p.waitNotifs(p.target, p.init.Name(), 1)
	assert.Equal(t, [][]byte{msg}, got)
	// The data is in place when the notification is seen.
	requireBytes(t, pattern(8192, 0x11), p.tgtBuf.Bytes(), "data before notification")

	// Reposting keeps the creation-time message unless PostXferReq overrides it.
	p.run(req, nil)
	p.run(req, NotifOptions([]byte("override")))
	p.run(req, nil)
	got = p.waitNotifs(p.target, p.init.Name(), 4)
	assert.Equal(t, [][]byte{msg, msg, []byte("override"), []byte("override")}, got)
	assert.Empty(t, p.received[p.init], "the initiator receives nothing")
}

func TestNativeNotificationOnPostOnly(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	require.NoError(t, err)
	defer p.init.ReleaseXferReq(req)
	p.run(req, nil)
	p.progress()
	assert.Empty(t, p.received[p.target], "no notification was asked for")

	// An empty, non-nil message is a notification too.
	p.run(req, NotifOptions(nil))
	assert.Equal(t, [][]byte{{}}, p.waitNotifs(p.target, p.init.Name(), 1))
}

func TestNativeGenNotifBinaryAndOrdered(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	msgs := [][]byte{[]byte("HB:a,b"), {0, 1, 2, 0, 255}, []byte("PUSH_REG:\x81\xa1k\xa1v"), make([]byte, 64<<10)}
	for _, m := range msgs {
		require.NoError(t, p.init.GenNotif(p.target.Name(), m, nil))
	}
	require.NoError(t, p.target.GenNotif(p.init.Name(), []byte("back"), &Options{Backends: []string{"UCX"}}))
	got := p.waitNotifs(p.target, p.init.Name(), len(msgs))
	require.Len(t, got, len(msgs))
	for i := range msgs {
		requireBytes(t, msgs[i], got[i], "message")
	}
	assert.Equal(t, [][]byte{[]byte("back")}, p.waitNotifs(p.init, p.target.Name(), 1))
	assert.Len(t, p.received[p.target], 1, "one sender")
}

func TestNativeGetNotifsEmptyAndWithBackend(t *testing.T) {
	a := newUCXAgent(t, testName(t), Config{})
	n, err := a.GetNotifs(nil)
	require.NoError(t, err)
	assert.Nil(t, n)
	n, err = a.GetNotifs(&Options{Backends: []string{"UCX"}})
	require.NoError(t, err)
	assert.Nil(t, n)
	_, err = a.GetNotifs(&Options{Backends: []string{"POSIX"}})
	requireNIXLErr(t, err, ErrNotFound)
}

func TestNativeGetNotifsWithoutNotifyingBackend(t *testing.T) {
	a := newAgent(t, testName(t), Config{})
	_, err := a.GetNotifs(nil)
	require.ErrorIs(t, err, ErrBackend, "an agent with no backend that supports notifications")
}

func TestNativeAppendNotifsReusesTheMap(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	for _, m := range []string{"a", "b", "c"} {
		require.NoError(t, p.init.GenNotif(p.target.Name(), []byte(m), nil))
	}
	inbox := Notifs{"earlier": {[]byte("kept")}}
	eventually(t, "three notifications appended", func() bool {
		var err error
		inbox, err = p.target.AppendNotifs(inbox, nil)
		require.NoError(t, err)
		return len(inbox[p.init.Name()]) >= 3
	}, p.init)
	assert.Equal(t, Notifs{
		"earlier":     {[]byte("kept")},
		p.init.Name(): {[]byte("a"), []byte("b"), []byte("c")},
	}, inbox)

	// Nothing new: the map comes back unchanged, and a nil map stays nil.
	same, err := p.target.AppendNotifs(inbox, nil)
	require.NoError(t, err)
	assert.Equal(t, 4, same.Count())
	none, err := p.target.AppendNotifs(nil, nil)
	require.NoError(t, err)
	assert.Nil(t, none)
}

func TestNativeNotifsPastTheScratchBuffer(t *testing.T) {
	// A scratch buffer of two entries: a round with more notifications
	// lists them in a malloc'd block, which must arrive intact and be freed.
	defer func(n int) { notifScratchSize = n }(notifScratchSize)
	notifScratchSize = 2 * int(unsafe.Sizeof(notifRef{}))
	p := newPeers(t, 4096, Config{})
	const n = 40
	for i := range n {
		require.NoError(t, p.init.GenNotif(p.target.Name(), fmt.Appendf(nil, "n%02d", i), nil))
	}
	var got []string
	most := 0
	eventually(t, "every notification", func() bool {
		before := len(got)
		require.NoError(t, p.target.PollEach(nil, nil, func(_ string, msg []byte) { got = append(got, string(msg)) }))
		most = max(most, len(got)-before)
		return len(got) >= n
	}, p.init)
	require.Len(t, got, n)
	for i, m := range got {
		assert.Equal(t, fmt.Sprintf("n%02d", i), m)
	}
	require.Greater(t, most, 2, "some round overflowed the scratch buffer")

	// The same through AppendNotifs.
	for i := range n {
		require.NoError(t, p.init.GenNotif(p.target.Name(), fmt.Appendf(nil, "a%02d", i), nil))
	}
	inbox := Notifs{}
	most = 0
	eventually(t, "every notification appended", func() bool {
		before := len(inbox[p.init.Name()])
		var err error
		inbox, err = p.target.AppendNotifs(inbox, nil)
		require.NoError(t, err)
		most = max(most, len(inbox[p.init.Name()])-before)
		return len(inbox[p.init.Name()]) >= n
	}, p.init)
	require.Len(t, inbox[p.init.Name()], n)
	for i, m := range inbox[p.init.Name()] {
		assert.Equal(t, fmt.Sprintf("a%02d", i), string(m))
	}
	require.Greater(t, most, 2, "some round overflowed the scratch buffer")
}
