package nixltest

import (
	"bytes"
	"fmt"
	"sort"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// message returns the i-th test notification of a sender: text, binary
// bytes including 0x00 and 0xff, and every tenth one 4 KiB long.
func message(sender string, i int) []byte {
	m := []byte(fmt.Sprintf("%s-%03d:", sender, i))
	m = append(m, 0x00, 0xff, byte(i), 0x00)
	if i%10 == 0 {
		m = append(m, bytes.Repeat([]byte{byte(i)}, 4096)...)
	}
	return m
}

// testGenNotifOrder: notifications from two senders, interleaved, arrive
// with their exact bytes, each sender's in order, none lost or duplicated.
func testGenNotifOrder(e *env) {
	const n = 100
	a, c, b := e.agent("sender1"), e.agent("sender2"), e.agent("receiver")
	e.exchange(a, b)
	e.exchange(c, b)

	for i := 0; i < n; i++ {
		e.noErr(a.GenNotif(b.Name(), message("a", i), nil), "GenNotif from sender1")
		e.noErr(c.GenNotif(b.Name(), message("c", i), nil), "GenNotif from sender2")
	}
	for _, s := range []struct {
		agent nixl.Agent
		tag   string
	}{{a, "a"}, {c, "c"}} {
		got := e.notifs(b, s.agent.Name(), n)
		for i, m := range got {
			if want := message(s.tag, i); !bytes.Equal(m, want) {
				e.t.Errorf("notification %d from %s: got %q (%d bytes), want %q (%d bytes)", i, s.agent.Name(), trunc(m), len(m), trunc(want), len(want))
				break
			}
		}
	}
	if p := e.pending(b); p.Count() != 0 {
		e.t.Errorf("receiver has %d notifications more than were sent", p.Count())
	}
	if p := e.pending(a); p.Count() != 0 {
		e.t.Errorf("sender1 received %v; nothing was sent to it", p)
	}

	e.wantErr(a.GenNotif(b.Name()+".nobody", []byte("x"), nil), nixl.ErrNotFound, "GenNotif to an unknown agent")

	// GetNotifs hands over a map the agent no longer uses (an empty result
	// may be nil).
	e.noErr(a.GenNotif(b.Name(), []byte("one"), nil), "GenNotif")
	e.mu.Lock()
	defer e.mu.Unlock()
	deadline := time.Now().Add(waitLimit)
	var m1 nixl.Notifs
	for m1.Count() == 0 {
		var err error
		m1, err = b.GetNotifs(nil)
		e.noErr(err, "GetNotifs")
		if time.Now().After(deadline) {
			e.t.Fatalf("no notification after %v", waitLimit)
		}
		time.Sleep(pollPause)
	}
	m1[a.Name()] = append(m1[a.Name()], []byte("planted by the caller"))
	m2, err := b.GetNotifs(nil)
	e.noErr(err, "GetNotifs")
	if m2.Count() != 0 {
		e.t.Errorf("GetNotifs after draining returned %q, want nothing", m2)
	}
	if got := strs(m1[a.Name()]); len(got) != 2 || got[0] != "one" {
		e.t.Errorf("first GetNotifs returned %q, want [one] (then the planted one)", got)
	}
}

func trunc(m []byte) []byte {
	if len(m) > 24 {
		return m[:24]
	}
	return m
}

// testTransferNotifications: many transfers in flight at once each deliver
// their own notification, exactly once, after their bytes.
func testTransferNotifications(e *env) {
	const n, size = 32, 1024
	a, b, src, dst := e.linked("initiator", "target", n*size, 8, 0)

	hs := make([]nixl.XferHandle, n)
	want := make([]string, n)
	for i := range hs {
		want[i] = fmt.Sprintf("xfer-%02d", i)
		h, err := a.CreateXferReq(nixl.Write, xferList(src.Desc(uint64(i*size), size)), xferList(dst.Desc(uint64(i*size), size)), b.Name(), nixl.NotifOptions([]byte(want[i])))
		e.noErr(err, "CreateXferReq")
		hs[i] = h
	}
	for _, h := range hs {
		e.post(a, h, nil)
	}
	// Each notification must find its bytes in place when it is seen.
	seen := map[string]bool{}
	for len(seen) < n {
		m := e.notifs(b, a.Name(), 1)[0]
		var i int
		if _, err := fmt.Sscanf(string(m), "xfer-%02d", &i); err != nil || i < 0 || i >= n || string(m) != want[i] {
			e.t.Fatalf("unexpected notification %q", m)
		}
		if seen[string(m)] {
			e.t.Fatalf("notification %q delivered twice", m)
		}
		seen[string(m)] = true
		lo, hi := i*size, (i+1)*size
		e.sameBytes(dst.Bytes()[lo:hi], src.Bytes()[lo:hi], fmt.Sprintf("block %d when its notification arrived", i))
	}
	for _, h := range hs {
		if st, err := e.wait(a, h); err != nil || st != nixl.StatusSuccess {
			e.t.Errorf("transfer ended with %v, %s", st, describe(err))
		}
		e.noErr(a.ReleaseXferReq(h), "ReleaseXferReq")
	}
	got := make([]string, 0, n)
	for s := range seen {
		got = append(got, s)
	}
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Errorf("notifications %q, want %q", got, want)
	}
	if p := e.pending(b); p.Count() != 0 {
		e.t.Errorf("target has %d notifications more than transfers", p.Count())
	}
}
