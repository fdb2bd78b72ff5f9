package loopback_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// rig is two agents on one fabric, each with one registered buffer, that
// know each other.
type rig struct {
	t        *testing.T
	f        *loopback.Fabric
	clock    *connector.ManualClock
	a, b     *loopback.Agent
	src, dst *nixl.Buffer // src is a's, dst is b's
}

const rigSize = 64 << 10

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newRig builds a rig on a manual clock; src holds a pattern, dst zeros.
func newRig(t *testing.T, opts ...loopback.FabricOption) *rig {
	t.Helper()
	r := &rig{t: t, clock: connector.NewManualClock(epoch)}
	f, err := loopback.NewFabric(append([]loopback.FabricOption{loopback.WithClock(r.clock)}, opts...)...)
	must(t, err)
	r.f = f
	r.a, r.b = r.agent("a"), r.agent("b")
	r.src, r.dst = buffer(t, rigSize, 1), buffer(t, rigSize, 0)
	// Cleanups run last-in first-out: close the fabric before freeing.
	t.Cleanup(func() { f.Close() })
	must(t, r.a.RegisterMem(regs(r.src), nil))
	must(t, r.b.RegisterMem(regs(r.dst), nil))
	load(t, r.a, r.b)
	load(t, r.b, r.a)
	return r
}

func (r *rig) agent(name string, opts ...loopback.AgentOption) *loopback.Agent {
	r.t.Helper()
	a, err := r.f.NewAgent(name, opts...)
	must(r.t, err)
	return a
}

// write makes a WRITE of n bytes at off from a's src to b's dst.
func (r *rig) write(off, n uint64, notif string) nixl.XferHandle {
	r.t.Helper()
	var opts *nixl.Options
	if notif != "" {
		opts = nixl.NotifOptions([]byte(notif))
	}
	h, err := r.a.CreateXferReq(nixl.Write, list(r.src.Desc(off, n)), list(r.dst.Desc(off, n)), r.b.Name(), opts)
	must(r.t, err)
	return h
}

// status returns a's status for h.
func (r *rig) status(h nixl.XferHandle) (nixl.Status, error) { return r.a.XferStatus(h) }

// notifs drains b's notifications from a, as strings.
func (r *rig) notifs() []string {
	r.t.Helper()
	n, err := r.b.GetNotifs(nil)
	must(r.t, err)
	var out []string
	for _, m := range n[r.a.Name()] {
		out = append(out, string(m))
	}
	return out
}

// landed reports whether dst[off:off+n] equals src's bytes there.
func (r *rig) landed(off, n uint64) bool {
	return bytes.Equal(r.dst.Bytes()[off:off+n], r.src.Bytes()[off:off+n])
}

// untouched reports whether dst[off:off+n] is still zero.
func (r *rig) untouched(off, n uint64) bool {
	return bytes.Count(r.dst.Bytes()[off:off+n], []byte{0}) == int(n)
}

func buffer(t *testing.T, size int, seed byte) *nixl.Buffer {
	t.Helper()
	b, err := nixl.AllocBuffer(size)
	must(t, err)
	t.Cleanup(func() { b.Free() })
	if seed != 0 {
		p := b.Bytes()
		for i := range p {
			// Never zero, and no short period, so misplaced bytes show.
			p[i] = (byte(i*31+int(seed)) ^ byte(i>>8)*13 ^ byte(i>>16)*101) | 1
		}
	}
	return b
}

func regs(bufs ...*nixl.Buffer) nixl.RegList {
	l := nixl.RegList{Mem: nixl.DRAM}
	for _, b := range bufs {
		l.Descs = append(l.Descs, b.RegDesc())
	}
	return l
}

func list(ds ...nixl.Desc) nixl.XferList { return nixl.XferList{Mem: nixl.DRAM, Descs: ds} }

func load(t *testing.T, dst, src nixl.Agent) {
	t.Helper()
	md, err := src.LocalMD()
	must(t, err)
	_, err = dst.LoadRemoteMD(md)
	must(t, err)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantStatus checks a (status, error) pair: the status, and the error's
// sentinel (nil for none).
func wantStatus(t *testing.T, what string, st nixl.Status, err error, want nixl.Status, sentinel error) {
	t.Helper()
	if st != want {
		t.Errorf("%s: status %v (err %v), want %v", what, st, err, want)
	}
	switch {
	case sentinel == nil && err != nil:
		t.Errorf("%s: error %v, want none", what, err)
	case sentinel != nil && !errors.Is(err, sentinel):
		t.Errorf("%s: error %v, want %v", what, err, sentinel)
	}
}
