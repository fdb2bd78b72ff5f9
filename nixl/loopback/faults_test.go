package loopback_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func addFault(t *testing.T, f *loopback.Fabric, flt loopback.Fault) loopback.RuleID {
	t.Helper()
	id, err := f.AddFault(flt)
	must(t, err)
	return id
}

func TestFailPost(t *testing.T) {
	r := newRig(t)
	id := addFault(t, r.f, loopback.Fault{Kind: loopback.FailPost, From: "a", To: "b", Count: 2})
	other := addFault(t, r.f, loopback.Fault{Kind: loopback.FailPost, From: "b", Status: nixl.StatusNotAllowed})

	h := r.write(0, 4096, "n")
	for i := 0; i < 2; i++ {
		st, err := r.a.PostXferReq(h, nil)
		wantStatus(t, fmt.Sprintf("post %d", i+1), st, err, nixl.StatusBackend, nixl.ErrBackend)
		if err != nil && !strings.Contains(err.Error(), "injected") {
			t.Errorf("error %q does not say the fault was injected", err)
		}
		st, err = r.status(h)
		wantStatus(t, "status after a failed post", st, err, nixl.StatusBackend, nixl.ErrBackend)
	}
	if !r.untouched(0, 4096) || len(r.notifs()) != 0 {
		t.Fatal("a failed post moved bytes or sent a notification")
	}
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "third post (the rule's count is spent)", st, err, nixl.StatusSuccess, nil)
	if !r.landed(0, 4096) {
		t.Error("bytes of the third post not in place")
	}

	// The rule for b -> anyone, with its own status.
	hb, err := r.b.CreateXferReq(nixl.Read, list(r.dst.Desc(0, 64)), list(r.src.Desc(0, 64)), r.a.Name(), nil)
	must(t, err)
	st, err = r.b.PostXferReq(hb, nil)
	wantStatus(t, "b's post", st, err, nixl.StatusNotAllowed, nixl.ErrNotAllowed)

	if n := r.f.Injected(id); n != 2 {
		t.Errorf("Injected(a->b rule) = %d, want 2", n)
	}
	if n := r.f.Injected(other); n != 1 {
		t.Errorf("Injected(b->* rule) = %d, want 1", n)
	}
	if c := r.f.Counters(); c.PostsFailed != 3 || c.Posted != 1 || c.Completed != 1 {
		t.Errorf("counters %+v", c)
	}
}

func TestFailInFlightWritesPartlyAndReports(t *testing.T) {
	r := newRig(t)
	id := addFault(t, r.f, loopback.Fault{Kind: loopback.FailInFlight, Count: 1})
	const n = 4096
	var descs []nixl.Desc
	for i := uint64(0); i < 4; i++ {
		descs = append(descs, r.src.Desc(i*n, n))
	}
	rdescs := make([]nixl.Desc, len(descs))
	for i, d := range descs {
		rdescs[i] = r.dst.Desc(d.Addr-r.src.Addr(), n)
	}
	h, err := r.a.CreateXferReq(nixl.Write, list(descs...), list(rdescs...), r.b.Name(), nixl.NotifOptions([]byte("lost")))
	must(t, err)
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "post of a transfer that fails in flight", st, err, nixl.StatusInProgress, nil)
	st, err = r.status(h)
	wantStatus(t, "status", st, err, nixl.StatusBackend, nixl.ErrBackend)
	if !r.landed(0, 2*n) || !r.untouched(2*n, 2*n) {
		t.Error("want the first half of the descriptors written and the rest untouched")
	}
	if got := r.notifs(); len(got) != 0 {
		t.Errorf("a failed transfer notified: %q", got)
	}
	if c := r.f.Counters(); c.InFlightFailed != 1 || c.Failed != 1 || c.Completed != 0 || c.Bytes != 2*n || c.NotifsSent != 0 {
		t.Errorf("counters %+v", c)
	}
	if r.f.Injected(id) != 1 {
		t.Errorf("Injected = %d, want 1", r.f.Injected(id))
	}
	// Reposting after the failure works: the rule is spent.
	st, err = r.a.PostXferReq(h, nil)
	wantStatus(t, "repost", st, err, nixl.StatusSuccess, nil)
	if got := fmt.Sprint(r.notifs()); got != "[lost]" {
		t.Errorf("notifications %s after the repost, want [lost]", got)
	}
}

func TestFailInFlightWithLatency(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	addFault(t, r.f, loopback.Fault{Kind: loopback.FailInFlight, Status: nixl.StatusRemoteDisconnect})
	h := r.write(0, 64, "x")
	_, err := r.a.PostXferReq(h, nil)
	must(t, err)
	st, err := r.status(h)
	wantStatus(t, "before completion", st, err, nixl.StatusInProgress, nil)
	r.clock.Advance(time.Millisecond)
	st, err = r.status(h)
	wantStatus(t, "after completion", st, err, nixl.StatusRemoteDisconnect, nixl.ErrRemoteDisconnect)
}

func TestDropNotif(t *testing.T) {
	r := newRig(t)
	id := addFault(t, r.f, loopback.Fault{Kind: loopback.DropNotif, To: "b", Count: 2})
	st, err := r.a.PostXferReq(r.write(0, 100, "first"), nil)
	wantStatus(t, "post", st, err, nixl.StatusSuccess, nil)
	if !r.landed(0, 100) {
		t.Error("a transfer whose notification is dropped must still move its bytes")
	}
	must(t, r.a.GenNotif(r.b.Name(), []byte("second"), nil))
	must(t, r.a.GenNotif(r.b.Name(), []byte("third"), nil))
	if got := fmt.Sprint(r.notifs()); got != "[third]" {
		t.Errorf("notifications %s, want [third]", got)
	}
	if c := r.f.Counters(); c.NotifsSent != 3 || c.NotifsDropped != 2 || c.NotifsDelivered != 1 {
		t.Errorf("counters %+v", c)
	}
	if r.f.Injected(id) != 2 {
		t.Errorf("Injected = %d, want 2", r.f.Injected(id))
	}
}

// A delayed notification holds back the later ones of its link, so order is
// kept; other links are not held back.
func TestDelayNotifKeepsOrder(t *testing.T) {
	r := newRig(t)
	c := r.agent("c")
	load(t, c, r.b)
	addFault(t, r.f, loopback.Fault{Kind: loopback.DelayNotif, From: "a", Delay: 5 * time.Millisecond, Count: 1})

	st, err := r.a.PostXferReq(r.write(0, 100, "delayed"), nil)
	wantStatus(t, "post", st, err, nixl.StatusSuccess, nil)
	if !r.landed(0, 100) {
		t.Error("bytes of a transfer with a delayed notification not in place")
	}
	must(t, r.a.GenNotif(r.b.Name(), []byte("behind"), nil))
	must(t, c.GenNotif(r.b.Name(), []byte("from c"), nil))

	n, err := r.b.GetNotifs(nil)
	must(t, err)
	if len(n[r.a.Name()]) != 0 || len(n[c.Name()]) != 1 {
		t.Fatalf("before the delay: %q; want only c's notification", n)
	}
	r.clock.Advance(5*time.Millisecond - 1)
	if got := r.notifs(); len(got) != 0 {
		t.Fatalf("%q before the delay elapsed", got)
	}
	r.clock.Advance(1)
	if got := fmt.Sprint(r.notifs()); got != "[delayed behind]" {
		t.Errorf("notifications %s, want [delayed behind]", got)
	}
	if cs := r.f.Counters(); cs.NotifsDelayed != 1 || cs.NotifsDelivered != 3 {
		t.Errorf("counters %+v", cs)
	}
}

// outcomes posts n transfers on a fresh rig with a 50% FailPost rule and
// returns which failed.
func outcomes(t *testing.T, seed uint64, n int) (string, int) {
	r := newRig(t, loopback.WithSeed(seed))
	id := addFault(t, r.f, loopback.Fault{Kind: loopback.FailPost, Probability: 0.5})
	var b strings.Builder
	h := r.write(0, 64, "")
	for i := 0; i < n; i++ {
		_, err := r.a.PostXferReq(h, nil)
		switch {
		case err == nil:
			b.WriteByte('.')
		case errors.Is(err, nixl.ErrBackend):
			b.WriteByte('x')
		default:
			t.Fatalf("post %d: %v", i, err)
		}
	}
	return b.String(), r.f.Injected(id)
}

func TestFaultsAreDeterministicFromTheSeed(t *testing.T) {
	const n = 200
	first, injected := outcomes(t, 42, n)
	again, _ := outcomes(t, 42, n)
	other, _ := outcomes(t, 43, n)
	if first != again {
		t.Errorf("same seed, different faults:\n%s\n%s", first, again)
	}
	if first == other {
		t.Errorf("seeds 42 and 43 injected the same faults: %s", first)
	}
	if fails := strings.Count(first, "x"); fails != injected || fails < n/4 || fails > 3*n/4 {
		t.Errorf("%d failures, Injected %d, for probability 0.5 over %d posts", fails, injected, n)
	}
}

func TestRemoveFault(t *testing.T) {
	r := newRig(t)
	id := addFault(t, r.f, loopback.Fault{Kind: loopback.DropNotif})
	must(t, r.a.GenNotif(r.b.Name(), []byte("dropped"), nil))
	if !r.f.RemoveFault(id) {
		t.Fatal("RemoveFault of a present rule returned false")
	}
	if r.f.RemoveFault(id) {
		t.Error("RemoveFault twice returned true")
	}
	must(t, r.a.GenNotif(r.b.Name(), []byte("kept"), nil))
	if got := fmt.Sprint(r.notifs()); got != "[kept]" {
		t.Errorf("notifications %s, want [kept]", got)
	}
	if r.f.Injected(id) != 1 {
		t.Errorf("Injected of a removed rule = %d, want 1", r.f.Injected(id))
	}
}

func TestAddFaultRejectsBadRules(t *testing.T) {
	f, err := loopback.NewFabric()
	must(t, err)
	defer f.Close()
	for _, c := range []struct {
		flt  loopback.Fault
		want string
	}{
		{loopback.Fault{}, "unknown fault kind"},
		{loopback.Fault{Kind: loopback.DropNotif, Probability: 1.5}, "probability"},
		{loopback.Fault{Kind: loopback.DropNotif, Probability: -0.1}, "probability"},
		{loopback.Fault{Kind: loopback.DropNotif, Count: -1}, "count"},
		{loopback.Fault{Kind: loopback.DelayNotif}, "positive Delay"},
		{loopback.Fault{Kind: loopback.FailPost, Delay: time.Second}, "only for DelayNotif"},
		{loopback.Fault{Kind: loopback.FailPost, Status: nixl.StatusSuccess + 1}, "failing status"},
		{loopback.Fault{Kind: loopback.DropNotif, Status: nixl.StatusBackend}, "only for FailPost"},
	} {
		_, err := f.AddFault(c.flt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AddFault(%+v) = %v, want an error about %q", c.flt, err, c.want)
		}
	}
	if id, err := f.AddFault(loopback.Fault{Kind: loopback.DropNotif}); err != nil || id != 1 {
		t.Errorf("first valid rule: id %d, err %v; want id 1 (refused rules take no ID)", id, err)
	}
}

func TestFaultKindString(t *testing.T) {
	for k, want := range map[loopback.FaultKind]string{
		loopback.DropNotif: "DropNotif", loopback.DelayNotif: "DelayNotif",
		loopback.FailPost: "FailPost", loopback.FailInFlight: "FailInFlight", 99: "FaultKind(99)",
	} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(k), got, want)
		}
	}
}
