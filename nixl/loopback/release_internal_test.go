package loopback

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
)

// releaseRig is two agents, a's src holding a pattern, b's dst zeros, and
// a WRITE of four separate descriptors (four copy runs) from src to dst.
type releaseRig struct {
	f        *Fabric
	clock    *connector.ManualClock
	a, b     *Agent
	src, dst *nixl.Buffer
	h        nixl.XferHandle
}

func newReleaseRig(t *testing.T, model TransferModel, faults ...Fault) *releaseRig {
	t.Helper()
	r := &releaseRig{clock: connector.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	f, err := NewFabric(WithClock(r.clock), WithModel(model))
	if err != nil {
		t.Fatal(err)
	}
	r.f = f
	for _, flt := range faults {
		if _, err := f.AddFault(flt); err != nil {
			t.Fatal(err)
		}
	}
	if r.a, err = f.NewAgent("a"); err != nil {
		t.Fatal(err)
	}
	if r.b, err = f.NewAgent("b"); err != nil {
		t.Fatal(err)
	}
	alloc := func() *nixl.Buffer {
		b, err := nixl.AllocBuffer(64 << 10)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free() })
		return b
	}
	r.src, r.dst = alloc(), alloc()
	t.Cleanup(func() { f.Close() }) // before the buffers are freed
	for i := range r.src.Bytes() {
		r.src.Bytes()[i] = byte(i) | 1
	}
	for ag, buf := range map[*Agent]*nixl.Buffer{r.a: r.src, r.b: r.dst} {
		if err := ag.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{buf.RegDesc()}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	md, err := r.b.LocalMD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.LoadRemoteMD(md); err != nil {
		t.Fatal(err)
	}
	var ls, rs []nixl.Desc
	for i := range uint64(4) {
		ls = append(ls, r.src.Desc(i*8192, 4096))
		rs = append(rs, r.dst.Desc(i*8192, 4096))
	}
	r.h, err = r.a.CreateXferReq(nixl.Write, nixl.XferList{Mem: nixl.DRAM, Descs: ls}, nixl.XferList{Mem: nixl.DRAM, Descs: rs}, "b", nixl.NotifOptions([]byte("n")))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Once ReleaseXferReq returns, no byte of the transfer is written, also when
// the release comes while another goroutine is copying it: for a scheduled
// (delayed) transfer, one failing in flight, and an instant one copied
// inside PostXferReq. The copy is paused at its first descriptor run by a
// hook, the release is made, and the copy resumes only once the release
// waits for it (or has returned, as the old code did without waiting):
// every byte in dst must be as it was when the release returned.
func TestNoByteWrittenAfterRelease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		model  TransferModel
		faults []Fault
	}{
		{"scheduled", FixedLatency(time.Millisecond), nil},
		{"fail in flight", FixedLatency(time.Millisecond), []Fault{{Kind: FailInFlight, From: "a", To: "b"}}},
		{"instant", Instant(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReleaseRig(t, tc.model, tc.faults...)
			copying, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			r.f.testHookCopy = func() {
				once.Do(func() { close(copying); <-resume })
			}
			waiting := make(chan struct{})
			var waitOnce sync.Once
			r.f.testHookReleaseWait = func() { waitOnce.Do(func() { close(waiting) }) }

			var wg sync.WaitGroup
			wg.Add(1)
			if tc.model.instant() {
				go func() { defer wg.Done(); r.a.PostXferReq(r.h, nil) }()
			} else {
				if st, err := r.a.PostXferReq(r.h, nil); st != nixl.StatusInProgress {
					t.Fatalf("post: %v %v", st, err)
				}
				r.clock.Advance(time.Millisecond)
				go func() { defer wg.Done(); r.b.GetNotifs(nil) }() // progresses the fabric: the copy runs here
			}
			<-copying

			released := make(chan []byte)
			go func() {
				if err := r.a.ReleaseXferReq(r.h); err != nil {
					t.Error(err)
				}
				released <- bytes.Clone(r.dst.Bytes())
			}()
			var atRelease []byte
			select {
			case <-waiting: // the release waits for the copy: let it go on
				close(resume)
				atRelease = <-released
			case atRelease = <-released: // the release did not wait
				close(resume)
			}
			wg.Wait()
			if !bytes.Equal(atRelease, r.dst.Bytes()) {
				n := 0
				for i := range atRelease {
					if atRelease[i] != r.dst.Bytes()[i] {
						n++
					}
				}
				t.Fatalf("%d bytes of dst were written after ReleaseXferReq returned", n)
			}
			if n, _ := r.b.GetNotifs(nil); len(n) != 0 {
				t.Errorf("a released transfer notified: %v", n)
			}
		})
	}
}

// Close, like ReleaseXferReq, returns only once no copy of its requests
// writes any more.
func TestNoByteWrittenAfterClose(t *testing.T) {
	r := newReleaseRig(t, FixedLatency(time.Millisecond))
	copying, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.f.testHookCopy = func() { once.Do(func() { close(copying); <-resume }) }
	waiting := make(chan struct{})
	var waitOnce sync.Once
	r.f.testHookReleaseWait = func() { waitOnce.Do(func() { close(waiting) }) }
	if _, err := r.a.PostXferReq(r.h, nil); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(time.Millisecond)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.b.GetNotifs(nil) }()
	<-copying
	closed := make(chan []byte)
	go func() { r.a.Close(); closed <- bytes.Clone(r.dst.Bytes()) }()
	var atClose []byte
	select {
	case <-waiting:
		close(resume)
		atClose = <-closed
	case atClose = <-closed:
		close(resume)
	case <-time.After(10 * time.Second):
		// Close waits for the copy some other way (deregistering the
		// memory waits for copies): let the copy go on. What is checked
		// stays the same: nothing written after Close returned.
		close(resume)
		atClose = <-closed
	}
	wg.Wait()
	if !bytes.Equal(atClose, r.dst.Bytes()) {
		t.Fatal("dst was written after Close returned")
	}
}
