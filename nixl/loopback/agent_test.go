package loopback_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func TestNewAgentNames(t *testing.T) {
	f, err := loopback.NewFabric()
	must(t, err)
	defer f.Close()
	_, err = f.NewAgent("")
	wantStatus(t, "empty name", nixl.StatusOf(err), err, nixl.StatusInvalidParam, nixl.ErrInvalidParam)
	a, err := f.NewAgent("x")
	must(t, err)
	_, err = f.NewAgent("x")
	wantStatus(t, "name in use", nixl.StatusOf(err), err, nixl.StatusInvalidParam, nixl.ErrInvalidParam)
	must(t, a.Close())
	if _, err := f.NewAgent("x"); err != nil {
		t.Errorf("the name of a closed agent is not free: %v", err)
	}
}

func TestFabricCloseClosesAgents(t *testing.T) {
	r := newRig(t)
	must(t, r.f.Close())
	must(t, r.f.Close())
	if _, err := r.a.GetNotifs(nil); !errors.Is(err, nixl.ErrClosed) {
		t.Errorf("GetNotifs after Fabric.Close: %v, want ErrClosed", err)
	}
	if _, err := r.f.NewAgent("late"); !errors.Is(err, nixl.ErrClosed) {
		t.Errorf("NewAgent after Fabric.Close: %v, want ErrClosed", err)
	}
	must(t, r.a.Close())
}

func TestRegisterMemRefusals(t *testing.T) {
	r := newRig(t)
	buf := buffer(t, 4096, 0)
	vram := nixl.RegList{Mem: nixl.VRAM, Descs: []nixl.RegDesc{buf.RegDesc()}}
	err := r.a.RegisterMem(vram, nil)
	wantStatus(t, "VRAM", nixl.StatusOf(err), err, nixl.StatusNotFound, nixl.ErrNotFound)

	heap := make([]byte, 4096)
	onHeap := nixl.RegDesc{Desc: nixl.Desc{Addr: uint64(uintptr(unsafe.Pointer(&heap[0]))), Len: 4096}}
	err = r.a.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{buf.RegDesc(), onHeap}}, nil)
	wantStatus(t, "Go heap memory", nixl.StatusOf(err), err, nixl.StatusBackend, nixl.ErrBackend)
	past := nixl.RegDesc{Desc: buf.Desc(0, 4097)}
	err = r.a.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{past}}, nil)
	wantStatus(t, "past the buffer's end", nixl.StatusOf(err), err, nixl.StatusBackend, nixl.ErrBackend)
	empty := nixl.RegDesc{Desc: buf.Desc(0, 0)}
	err = r.a.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{empty}}, nil)
	wantStatus(t, "length 0", nixl.StatusOf(err), err, nixl.StatusBackend, nixl.ErrBackend)

	// The refused list registered nothing, not even its good first entry.
	err = r.a.DeregisterMem(regs(buf), nil)
	wantStatus(t, "deregister after a refused registration", nixl.StatusOf(err), err, nixl.StatusNotFound, nixl.ErrNotFound)
	must(t, r.a.RegisterMem(nixl.RegList{Mem: nixl.DRAM}, nil)) // an empty list is a no-op
}

func TestDuplicateRegistrationNeedsTwoDeregistrations(t *testing.T) {
	r := newRig(t)
	buf := buffer(t, 4096, 0)
	must(t, r.a.RegisterMem(regs(buf, buf), nil))
	err := r.a.DeregisterMem(regs(buf, buf, buf), nil)
	wantStatus(t, "three deregistrations of two", nixl.StatusOf(err), err, nixl.StatusNotFound, nixl.ErrNotFound)
	must(t, r.a.DeregisterMem(regs(buf), nil))
	must(t, r.a.DeregisterMem(regs(buf), nil))
	err = r.a.DeregisterMem(regs(buf), nil)
	wantStatus(t, "a third deregistration", nixl.StatusOf(err), err, nixl.StatusNotFound, nixl.ErrNotFound)
}

// Memory the target deregistered after its metadata was loaded fails the
// transfer, as a stale remote key would, and the failure is reported.
func TestTransferToDeregisteredMemoryFails(t *testing.T) {
	r := newRig(t)
	h := r.write(0, 4096, "x")
	must(t, r.b.DeregisterMem(regs(r.dst), nil))
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "post", st, err, nixl.StatusInProgress, nil)
	st, err = r.status(h)
	wantStatus(t, "status", st, err, nixl.StatusBackend, nixl.ErrBackend)
	if !r.untouched(0, 4096) || len(r.notifs()) != 0 {
		t.Error("a transfer into deregistered memory wrote bytes or notified")
	}
}

func TestTransferToSelf(t *testing.T) {
	r := newRig(t)
	other := buffer(t, 4096, 0)
	must(t, r.a.RegisterMem(regs(other), nil))
	h, err := r.a.CreateXferReq(nixl.Write, list(r.src.Desc(0, 4096)), list(other.Desc(0, 4096)), r.a.Name(), nixl.NotifOptions([]byte("self")))
	must(t, err)
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "post to self", st, err, nixl.StatusSuccess, nil)
	if string(other.Bytes()) != string(r.src.Bytes()[:4096]) {
		t.Error("bytes not copied within the agent")
	}
	n, err := r.a.GetNotifs(nil)
	must(t, err)
	if got := fmt.Sprint(texts(n[r.a.Name()])); got != "[self]" {
		t.Errorf("self notifications %s, want [self]", got)
	}
	must(t, r.a.CheckRemoteMD(r.a.Name(), list(other.Desc(0, 10))))
	err = r.a.InvalidateRemoteMD(r.a.Name())
	wantStatus(t, "invalidate self", nixl.StatusOf(err), err, nixl.StatusInvalidParam, nixl.ErrInvalidParam)
}

func TestMetadataOfAnotherFabric(t *testing.T) {
	r, other := newRig(t), newRig(t)
	md, err := other.a.LocalMD()
	must(t, err)
	_, err = r.b.LoadRemoteMD(md)
	wantStatus(t, "foreign metadata", nixl.StatusOf(err), err, nixl.StatusBackend, nixl.ErrBackend)
}

func TestConflictingRegionMetadata(t *testing.T) {
	r := newRig(t)
	must(t, r.b.DeregisterMem(regs(r.dst), nil))
	must(t, r.b.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{{Desc: r.dst.RegDesc().Desc, Meta: []byte("key-2")}}}, nil))
	md, err := r.b.LocalMD()
	must(t, err)
	_, err = r.a.LoadRemoteMD(md)
	wantStatus(t, "region known with other metadata", nixl.StatusOf(err), err, nixl.StatusNotAllowed, nixl.ErrNotAllowed)
}

func TestNotificationBytesAreCopied(t *testing.T) {
	r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	msg := []byte("original")
	opts := nixl.NotifOptions(msg)
	h, err := r.a.CreateXferReq(nixl.Write, list(r.src.Desc(0, 8)), list(r.dst.Desc(0, 8)), r.b.Name(), opts)
	must(t, err)
	_, err = r.a.PostXferReq(h, nil)
	must(t, err)
	must(t, r.a.GenNotif(r.b.Name(), msg, nil))
	copy(msg, "CHANGED!")
	must(t, r.a.GenNotif(r.b.Name(), []byte{}, nil))
	r.clock.Advance(time.Millisecond)
	st, err := r.a.XferStatus(h)
	wantStatus(t, "status", st, err, nixl.StatusSuccess, nil)
	n, err := r.b.GetNotifs(nil)
	must(t, err)
	// The GenNotifs were queued at once; the transfer's notification joins
	// the queue when the initiator sees the transfer done, behind them.
	got := n[r.a.Name()]
	if len(got) != 3 || string(got[0]) != "original" || got[1] == nil || len(got[1]) != 0 || string(got[2]) != "original" {
		t.Errorf("notifications %q, want [original \"\" original] (the empty one not nil)", got)
	}
}

// Close waits for calls in flight and races cleanly with pollers, posts and
// a peer's transfers (run with -race).
func TestCloseRacesWithEverything(t *testing.T) {
	for round := 0; round < 20; round++ {
		r := newRig(t, loopback.WithModel(loopback.FixedLatency(time.Microsecond)))
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for _, ag := range []*loopback.Agent{r.a, r.b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := ag.GetNotifs(nil); err != nil && !errors.Is(err, nixl.ErrClosed) {
						t.Errorf("GetNotifs: %v", err)
						return
					}
					r.clock.Advance(time.Microsecond)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h, err := r.a.CreateXferReq(nixl.Write, list(r.src.Desc(0, 1024)), list(r.dst.Desc(0, 1024)), r.b.Name(), nixl.NotifOptions([]byte("n")))
				if err != nil {
					if errors.Is(err, nixl.ErrClosed) || errors.Is(err, nixl.ErrNotFound) {
						continue
					}
					t.Errorf("CreateXferReq: %v", err)
					return
				}
				r.a.PostXferReq(h, nil)
				r.a.XferStatus(h)
				if i%2 == 0 {
					r.a.ReleaseXferReq(h)
				}
			}
		}()
		time.Sleep(time.Millisecond)
		victim := r.b
		if round%2 == 1 {
			victim = r.a
		}
		must(t, victim.Close())
		close(stop)
		wg.Wait()
		r.f.Close()
	}
}

// Descriptors that continue each other in memory but lie in two different
// Buffers cannot be copied as one range; the agent copies them one by one.
func TestContiguousRunAcrossTwoBuffers(t *testing.T) {
	r := newRig(t)
	const size = 64 << 10
	var bufs []*nixl.Buffer
	for i := 0; i < 16; i++ {
		bufs = append(bufs, buffer(t, size, byte(i+1)))
	}
	var lo, hi *nixl.Buffer
	for _, x := range bufs {
		for _, y := range bufs {
			if x.Addr()+size == y.Addr() {
				lo, hi = x, y
			}
		}
	}
	if lo == nil {
		t.Skip("mmap placed no two buffers back to back; the fallback path is not reachable here")
	}
	must(t, r.a.RegisterMem(regs(lo, hi), nil))
	local := list(lo.Desc(size-4096, 4096), hi.Desc(0, 4096))
	remote := list(r.dst.Desc(0, 4096), r.dst.Desc(4096, 4096))
	h, err := r.a.CreateXferReq(nixl.Write, local, remote, r.b.Name(), nil)
	must(t, err)
	st, err := r.a.PostXferReq(h, nil)
	wantStatus(t, "post", st, err, nixl.StatusSuccess, nil)
	want := append(append([]byte{}, lo.Bytes()[size-4096:]...), hi.Bytes()[:4096]...)
	if string(r.dst.Bytes()[:8192]) != string(want) {
		t.Error("bytes of a run across two buffers differ")
	}
}

// Runs contiguous on one side only are not merged wrongly.
func TestOneSidedRuns(t *testing.T) {
	r := newRig(t)
	const n = 1024
	cases := map[string][2][]nixl.Desc{
		"local contiguous": {
			{r.src.Desc(0, n), r.src.Desc(n, n), r.src.Desc(2*n, n)},
			{r.dst.Desc(5*n, n), r.dst.Desc(7*n, n), r.dst.Desc(9*n, n)},
		},
		"remote contiguous": {
			{r.src.Desc(0, n), r.src.Desc(2*n, n), r.src.Desc(4*n, n)},
			{r.dst.Desc(20*n, n), r.dst.Desc(21*n, n), r.dst.Desc(22*n, n)},
		},
	}
	for name, c := range cases {
		h, err := r.a.CreateXferReq(nixl.Write, list(c[0]...), list(c[1]...), r.b.Name(), nil)
		must(t, err)
		_, err = r.a.PostXferReq(h, nil)
		must(t, err)
		for i := range c[0] {
			got := r.dst.Bytes()[c[1][i].Addr-r.dst.Addr():][:n]
			want := r.src.Bytes()[c[0][i].Addr-r.src.Addr():][:n]
			if string(got) != string(want) {
				t.Errorf("%s: descriptor %d landed wrong", name, i)
			}
		}
	}
}
