package loopback_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func TestInstantCompletesInsidePost(t *testing.T) {
	r := newRig(t)
	h := r.write(0, 4096, "done")
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "PostXferReq", st, err, nixl.StatusSuccess, nil)
	if !r.landed(0, 4096) {
		t.Error("bytes not in place when PostXferReq returned success")
	}
	if got := r.notifs(); fmt.Sprint(got) != "[done]" {
		t.Errorf("notifications %q, want [done] at once", got)
	}
	c := r.f.Counters()
	if c.Posted != 1 || c.Completed != 1 || c.Bytes != 4096 || c.NotifsSent != 1 || c.NotifsDelivered != 1 {
		t.Errorf("counters %+v", c)
	}
}

func TestFixedLatency(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(10*time.Millisecond)))
	h := r.write(0, 4096, "done")
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "PostXferReq", st, err, nixl.StatusInProgress, nil)

	r.clock.Advance(10*time.Millisecond - time.Nanosecond)
	st, err = r.status(h)
	wantStatus(t, "status 1ns before the latency", st, err, nixl.StatusInProgress, nil)
	if !r.untouched(0, 4096) || len(r.notifs()) != 0 {
		t.Fatal("bytes or notification visible before the latency elapsed")
	}

	r.clock.Advance(time.Nanosecond)
	// The target's poll progresses the fabric: the bytes land. The
	// notification waits, as with NIXL's UCX backend, for the initiator to
	// see the transfer done.
	if got := r.notifs(); len(got) != 0 {
		t.Fatalf("notifications %q before the initiator polled", got)
	}
	if !r.landed(0, 4096) {
		t.Error("bytes not in place at the latency")
	}
	st, err = r.status(h)
	wantStatus(t, "status at the latency", st, err, nixl.StatusSuccess, nil)
	if got := r.notifs(); fmt.Sprint(got) != "[done]" {
		t.Fatalf("notifications %q after the initiator's poll, want [done]", got)
	}
	st, err = r.status(h)
	wantStatus(t, "status again", st, err, nixl.StatusSuccess, nil)
	if got := r.notifs(); len(got) != 0 {
		t.Errorf("a second poll sent the notification again: %q", got)
	}
}

// Releasing a completed request sends its held notification, as NIXL's
// releaseXferReq checks the transfer first; releasing it before completion
// cancels it.
func TestReleaseSendsHeldNotification(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	h := r.write(0, 64, "on release")
	_, err := r.a.PostXferReq(h, nil)
	must(t, err)
	r.clock.Advance(time.Millisecond)
	if got := r.notifs(); len(got) != 0 {
		t.Fatalf("notifications %q before the initiator looked", got)
	}
	must(t, r.a.ReleaseXferReq(h))
	if got := fmt.Sprint(r.notifs()); got != "[on release]" {
		t.Errorf("notifications %s after release, want [on release]", got)
	}
	if c := r.f.Counters(); c.Cancelled != 0 || c.Completed != 1 || c.NotifsDelivered != 1 {
		t.Errorf("counters %+v", c)
	}
}

// Transfers on one link share its bandwidth one after another; another link
// is independent.
func TestBandwidthQueuesTransfersOnALink(t *testing.T) {
	// 1 MB/s: 1000 bytes hold a link for 1ms; plus 1ms latency.
	r := newRig(t, loopback.WithModel(loopback.Bandwidth(1e6, time.Millisecond)))
	c := r.agent("c")
	cbuf := buffer(t, rigSize, 0)
	must(t, c.RegisterMem(regs(cbuf), nil))
	load(t, r.a, c)

	h1 := r.write(0, 1000, "one")
	h2 := r.write(1000, 3000, "two")
	h3, err := r.a.CreateXferReq(nixl.Write, list(r.src.Desc(0, 1000)), list(cbuf.Desc(0, 1000)), c.Name(), nil)
	must(t, err)
	for _, h := range []nixl.XferHandle{h1, h2, h3} {
		st, err := r.a.PostXferReq(h, nil)
		wantStatus(t, "PostXferReq", st, err, nixl.StatusInProgress, nil)
	}
	// h1 ends at 1ms + 1ms, h2 at 1ms + 3ms + 1ms (behind h1), h3 at 2ms.
	steps := []struct {
		at     time.Duration
		done   [3]bool
		notifs string
	}{
		{1999 * time.Microsecond, [3]bool{false, false, false}, "[]"},
		{2 * time.Millisecond, [3]bool{true, false, true}, "[one]"},
		{4999 * time.Microsecond, [3]bool{true, false, true}, "[]"},
		{5 * time.Millisecond, [3]bool{true, true, true}, "[two]"},
	}
	var now time.Duration
	for _, s := range steps {
		r.clock.Advance(s.at - now)
		now = s.at
		for i, h := range []nixl.XferHandle{h1, h2, h3} {
			st, err := r.status(h)
			must(t, err)
			if (st == nixl.StatusSuccess) != s.done[i] {
				t.Errorf("at %v: transfer %d is %v, want done=%v", s.at, i+1, st, s.done[i])
			}
		}
		if got := fmt.Sprint(r.notifs()); got != s.notifs {
			t.Errorf("at %v: notifications %s, want %s", s.at, got, s.notifs)
		}
	}
	if !r.landed(0, 4000) {
		t.Error("bytes of h1 and h2 not in place")
	}
}

func TestGenNotifTakesTheLatency(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Second)))
	must(t, r.a.GenNotif(r.b.Name(), []byte("hi"), nil))
	if got := r.notifs(); len(got) != 0 {
		t.Fatalf("notification %q before the latency", got)
	}
	r.clock.Advance(time.Second)
	if got := fmt.Sprint(r.notifs()); got != "[hi]" {
		t.Fatalf("notifications %s, want [hi]", got)
	}
}

// An agent's own model applies to what it initiates.
func TestAgentModelOverridesFabricModel(t *testing.T) {
	r := newRig(t)
	slow := r.agent("slow", loopback.AgentModel(loopback.FixedLatency(time.Second)))
	buf := buffer(t, 4096, 3)
	must(t, slow.RegisterMem(regs(buf), nil))
	load(t, slow, r.b)
	h, err := slow.CreateXferReq(nixl.Write, list(buf.Desc(0, 4096)), list(r.dst.Desc(0, 4096)), r.b.Name(), nil)
	must(t, err)
	st, err := slow.PostXferReq(h, nil)
	wantStatus(t, "slow agent's post", st, err, nixl.StatusInProgress, nil)
	r.clock.Advance(time.Second)
	st, err = slow.XferStatus(h)
	wantStatus(t, "slow agent's status after its latency", st, err, nixl.StatusSuccess, nil)

	// The fabric's other agents stay instant.
	st, err = r.a.PostXferReq(r.write(0, 64, ""), nil)
	wantStatus(t, "instant agent's post", st, err, nixl.StatusSuccess, nil)
}

func TestRepostWhileInProgress(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	h := r.write(0, 64, "")
	_, err := r.a.PostXferReq(h, nil)
	must(t, err)
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "repost in flight", st, err, nixl.StatusRepostActive, nixl.ErrRepostActive)
	r.clock.Advance(time.Millisecond)
	st, err = r.status(h)
	wantStatus(t, "status", st, err, nixl.StatusSuccess, nil)
	if c := r.f.Counters(); c.Posted != 1 || c.Completed != 1 {
		t.Errorf("counters %+v: the refused repost must not count", c)
	}
}

// A released request is cancelled: no bytes, no notification.
func TestReleaseCancels(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	h := r.write(0, 4096, "never")
	_, err := r.a.PostXferReq(h, nil)
	must(t, err)
	must(t, r.a.ReleaseXferReq(h))
	r.clock.Advance(time.Hour)
	if got := r.notifs(); len(got) != 0 {
		t.Errorf("notifications %q from a cancelled transfer", got)
	}
	if !r.untouched(0, 4096) {
		t.Error("a cancelled transfer wrote bytes")
	}
	if c := r.f.Counters(); c.Cancelled != 1 || c.Completed != 0 || c.Bytes != 0 {
		t.Errorf("counters %+v", c)
	}
}

// Invalidating the peer while a transfer is in flight makes XferStatus say
// NOT_FOUND, as NIXL does; the transfer itself goes on.
func TestInvalidateInFlight(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	h := r.write(0, 64, "held")
	_, err := r.a.PostXferReq(h, nil)
	must(t, err)
	must(t, r.a.InvalidateRemoteMD(r.b.Name()))
	st, err := r.status(h)
	wantStatus(t, "status after invalidation", st, err, nixl.StatusNotFound, nixl.ErrNotFound)
	r.clock.Advance(time.Millisecond)
	r.notifs() // progress
	if !r.landed(0, 64) {
		t.Error("the transfer stopped when its initiator forgot the target")
	}
	st, err = r.status(h)
	wantStatus(t, "status after completion, peer still forgotten", st, err, nixl.StatusNotFound, nixl.ErrNotFound)
	load(t, r.a, r.b)
	st, err = r.status(h)
	wantStatus(t, "status after reloading the peer", st, err, nixl.StatusSuccess, nil)
	if got := fmt.Sprint(r.notifs()); got != "[held]" {
		t.Errorf("notifications %s, want [held]", got)
	}
}

func TestModelValidation(t *testing.T) {
	for _, m := range []loopback.TransferModel{
		{Latency: -1},
		{BytesPerSec: -5},
	} {
		if _, err := loopback.NewFabric(loopback.WithModel(m)); err == nil {
			t.Errorf("NewFabric accepted model %+v", m)
		}
	}
	f, err := loopback.NewFabric()
	must(t, err)
	defer f.Close()
	if _, err := f.NewAgent("x", loopback.AgentModel(loopback.TransferModel{Latency: -time.Second})); err == nil {
		t.Error("NewAgent accepted a negative latency")
	}
	if _, err := loopback.NewFabric(loopback.WithClock(nil)); err == nil {
		t.Error("NewFabric accepted a nil clock")
	}
}

func TestModelString(t *testing.T) {
	for m, want := range map[loopback.TransferModel]string{
		loopback.Instant():                        "instant",
		loopback.FixedLatency(time.Millisecond):   "fixed latency 1ms",
		loopback.Bandwidth(1e9, time.Microsecond): "bandwidth 1e+09 B/s + latency 1µs",
	} {
		if got := m.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", m, got, want)
		}
	}
}

// Reposting a request whose last transfer completed unseen sends the held
// notification first.
func TestRepostSendsHeldNotificationFirst(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	h := r.write(0, 64, "first")
	_, err := r.a.PostXferReq(h, nil)
	must(t, err)
	r.clock.Advance(time.Millisecond)
	r.notifs() // the bytes land; the notification is held
	_, err = r.a.PostXferReq(h, nixl.NotifOptions([]byte("second")))
	must(t, err)
	r.clock.Advance(time.Millisecond)
	st, err := r.status(h)
	wantStatus(t, "status", st, err, nixl.StatusSuccess, nil)
	if got := fmt.Sprint(r.notifs()); got != "[first second]" {
		t.Errorf("notifications %s, want [first second]", got)
	}
}
