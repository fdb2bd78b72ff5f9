package nixl_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// releaseOnly is an Agent that is not an XferReleaser even when the agent
// it wraps is, so that ReleaseXferReqs takes its one-call-per-request path.
type releaseOnly struct{ nixl.Agent }

// writePair is a loopback initiator with 8 KiB registered, and a peer whose
// 8 KiB it may WRITE into: what the release tests and example need to make
// requests.
type writePair struct {
	fabric   *loopback.Fabric
	init     *loopback.Agent
	peer     string
	src, dst *nixl.Buffer
}

func newWritePair() (*writePair, error) {
	fabric, err := loopback.NewFabric()
	if err != nil {
		return nil, err
	}
	p := &writePair{fabric: fabric}
	target, err := fabric.NewAgent("target")
	if err == nil {
		p.init, err = fabric.NewAgent("init")
	}
	if err == nil {
		p.src, err = nixl.AllocBuffer(8192)
	}
	if err == nil {
		p.dst, err = nixl.AllocBuffer(8192)
	}
	if err == nil {
		err = p.init.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{p.src.RegDesc()}}, nil)
	}
	if err == nil {
		err = target.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{p.dst.RegDesc()}}, nil)
	}
	var md []byte
	if err == nil {
		md, err = target.LocalMD()
	}
	if err == nil {
		p.peer, err = p.init.LoadRemoteMD(md)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// write makes a 4 KiB WRITE request at offset off of both buffers.
func (p *writePair) write(off uint64) (nixl.XferHandle, error) {
	return p.init.CreateXferReq(nixl.Write, nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{p.src.Desc(off, 4096)}},
		nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{p.dst.Desc(off, 4096)}}, p.peer, nil)
}

// Close closes the fabric, then frees the buffers.
func (p *writePair) Close() {
	p.fabric.Close()
	for _, b := range []*nixl.Buffer{p.src, p.dst} {
		if b != nil {
			b.Free()
		}
	}
}

// TestReleaseXferReqsFallback releases through ReleaseXferReq one request
// at a time for an agent that is not an XferReleaser: each live request is
// released, an unknown one and a repeat get ErrInvalidParam, a short errs
// releases nothing, and a closed agent gives ErrClosed.
func TestReleaseXferReqsFallback(t *testing.T) {
	p, err := newWritePair()
	require.NoError(t, err)
	defer p.Close()
	mk := func(off uint64) nixl.XferHandle {
		h, err := p.write(off)
		require.NoError(t, err)
		return h
	}
	a := p.init
	r0, r1 := mk(0), mk(4096)
	agent := releaseOnly{a}

	require.ErrorIs(t, nixl.ReleaseXferReqs(agent, []nixl.XferHandle{r0}, nil), nixl.ErrInvalidParam)
	list := []nixl.XferHandle{r0, 1 << 62, r0, r1}
	errs := make([]error, len(list))
	require.NoError(t, nixl.ReleaseXferReqs(agent, list, errs))
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], nixl.ErrInvalidParam)
	assert.ErrorIs(t, errs[2], nixl.ErrInvalidParam, "a repeat finds its handle released")
	assert.NoError(t, errs[3])
	for _, h := range []nixl.XferHandle{r0, r1} {
		assert.ErrorIs(t, a.ReleaseXferReq(h), nixl.ErrInvalidParam, "released once already")
	}

	r2 := mk(0)
	require.NoError(t, a.Close())
	require.ErrorIs(t, nixl.ReleaseXferReqs(agent, []nixl.XferHandle{r2}, make([]error, 1)), nixl.ErrClosed)
}

// ReleaseXferReqs releases every request of a finished job in one call: on
// a native agent under SyncNone that is one cgo crossing; on other agents
// (here a loopback agent) one ReleaseXferReq each.
func ExampleReleaseXferReqs() {
	p, err := newWritePair()
	if err != nil {
		panic(err)
	}
	defer p.Close()
	var reqs []nixl.XferHandle
	for off := uint64(0); off < 8192; off += 4096 {
		h, err := p.write(off)
		if err != nil {
			panic(err)
		}
		reqs = append(reqs, h)
	}
	errs := make([]error, len(reqs))
	if err := nixl.ReleaseXferReqs(p.init, reqs, errs); err != nil {
		panic(err)
	}
	fmt.Println(errs[0], errs[1])
	// Output: <nil> <nil>
}
