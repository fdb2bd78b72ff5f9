package loopback_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func TestDisconnectFailsTransfersInFlight(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	h := r.write(0, 4096, "x")
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "post", st, err, nixl.StatusInProgress, nil)
	// A delayed GenNotif is on its way too.
	must(t, r.a.GenNotif(r.b.Name(), []byte("in flight"), nil))

	must(t, r.f.Disconnect("b"))
	st, err = r.status(h)
	wantStatus(t, "status after the target disconnected", st, err, nixl.StatusRemoteDisconnect, nixl.ErrRemoteDisconnect)
	// As in NIXL, seeing the disconnect forgets the peer.
	_, err = r.a.CreateXferReq(nixl.Write, list(r.src.Desc(0, 64)), list(r.dst.Desc(0, 64)), "b", nil)
	wantStatus(t, "CreateXferReq after the disconnect", nixl.StatusOf(err), err, nixl.StatusNotFound, nixl.ErrNotFound)
	st, err = r.status(h)
	wantStatus(t, "status again", st, err, nixl.StatusRemoteDisconnect, nixl.ErrRemoteDisconnect)

	r.clock.Advance(time.Hour)
	if !r.untouched(0, 4096) {
		t.Error("a transfer failed by a disconnect wrote bytes")
	}
	if got := r.notifs(); len(got) != 0 {
		t.Errorf("notifications %q survived the disconnect", got)
	}
	if c := r.f.Counters(); c.Disconnects != 1 || c.Failed != 1 || c.NotifsLost != 1 || c.Completed != 0 {
		t.Errorf("counters %+v", c)
	}
}

func TestDisconnectFailsNewPostsUntilReconnect(t *testing.T) {
	r := newRig(t)
	h := r.write(0, 4096, "after")
	must(t, r.f.Disconnect("b"))
	must(t, r.f.Disconnect("b")) // idempotent

	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "post to a disconnected agent", st, err, nixl.StatusRemoteDisconnect, nixl.ErrRemoteDisconnect)
	err = r.b.GenNotif(r.a.Name(), []byte("x"), nil)
	wantStatus(t, "GenNotif from a disconnected agent", nixl.StatusOf(err), err, nixl.StatusRemoteDisconnect, nixl.ErrRemoteDisconnect)
	// The post forgot b; the request can no longer be posted.
	st, err = r.a.PostXferReq(h, nil)
	wantStatus(t, "repost after the peer was forgotten", st, err, nixl.StatusNotFound, nixl.ErrNotFound)

	must(t, r.f.Reconnect("b"))
	load(t, r.a, r.b)
	h2 := r.write(0, 4096, "after")
	st, err = r.a.PostXferReq(h2, nil)
	wantStatus(t, "post after Reconnect and reload", st, err, nixl.StatusSuccess, nil)
	if !r.landed(0, 4096) || fmt.Sprint(r.notifs()) != "[after]" {
		t.Error("transfer after Reconnect did not arrive")
	}
	if c := r.f.Counters(); c.Disconnects != 2 {
		t.Errorf("Disconnects = %d, want 2 (one post, one GenNotif)", c.Disconnects)
	}
}

func TestDisconnectedInitiatorFails(t *testing.T) {
	r := newRig(t)
	must(t, r.f.Disconnect("a"))
	st, err := r.a.PostXferReq(r.write(0, 64, ""), nil)
	wantStatus(t, "post from a disconnected agent", st, err, nixl.StatusRemoteDisconnect, nixl.ErrRemoteDisconnect)
}

func TestDisconnectUnknownAgent(t *testing.T) {
	r := newRig(t)
	err := r.f.Disconnect("nobody")
	wantStatus(t, "Disconnect", nixl.StatusOf(err), err, nixl.StatusNotFound, nixl.ErrNotFound)
	err = r.f.Reconnect("nobody")
	wantStatus(t, "Reconnect", nixl.StatusOf(err), err, nixl.StatusNotFound, nixl.ErrNotFound)
}

// A closed peer is a disconnected one; a new agent under its name is a
// different peer, which NIXL refuses to load over the old metadata.
func TestPeerClosedAndReplaced(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	h := r.write(0, 64, "")
	_, err := r.a.PostXferReq(h, nil)
	must(t, err)
	must(t, r.b.Close())
	st, err := r.status(h)
	wantStatus(t, "status after the target closed", st, err, nixl.StatusRemoteDisconnect, nixl.ErrRemoteDisconnect)

	// a forgot the old b when it saw the disconnect, so the new b loads.
	nb := r.agent("b")
	load(t, r.a, nb)
	must(t, r.a.GenNotif("b", []byte("hi"), nil))
	r.clock.Advance(time.Millisecond)
	if n, err := nb.GetNotifs(nil); err != nil || fmt.Sprint(texts(n["a"])) != "[hi]" {
		t.Errorf("new b got %v, %v; want [hi] from a", n, err)
	}

	// Without the disconnect being seen, a keeps the old b's metadata.
	r2 := newRig(t)
	must(t, r2.b.Close())
	nb2 := r2.agent("b")
	md, err := nb2.LocalMD()
	must(t, err)
	_, err = r2.a.LoadRemoteMD(md)
	wantStatus(t, "loading the new b over the old", nixl.StatusOf(err), err, nixl.StatusNotAllowed, nixl.ErrNotAllowed)
	err = r2.a.GenNotif("b", []byte("x"), nil)
	wantStatus(t, "GenNotif to the closed b", nixl.StatusOf(err), err, nixl.StatusRemoteDisconnect, nixl.ErrRemoteDisconnect)
	must(t, r2.a.InvalidateRemoteMD("b"))
	_, err = r2.a.LoadRemoteMD(md)
	must(t, err)
	must(t, r2.a.GenNotif("b", []byte("hello new b"), nil))
	n, err := nb2.GetNotifs(nil)
	must(t, err)
	if got := fmt.Sprint(texts(n["a"])); got != "[hello new b]" {
		t.Errorf("new b got %s, want [hello new b]", got)
	}
}

func texts(msgs [][]byte) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m)
	}
	return out
}
