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

// TestReleaseXferReqsFallback releases through ReleaseXferReq one request
// at a time for an agent that is not an XferReleaser: each live request is
// released, an unknown one and a repeat get ErrInvalidParam, a short errs
// releases nothing, and a closed agent gives ErrClosed.
func TestReleaseXferReqsFallback(t *testing.T) {
	fabric, err := loopback.NewFabric()
	require.NoError(t, err)
	defer fabric.Close()
	a, err := fabric.NewAgent("init")
	require.NoError(t, err)
	b, err := fabric.NewAgent("target")
	require.NoError(t, err)
	src, err := nixl.AllocBuffer(8192)
	require.NoError(t, err)
	defer src.Free()
	dst, err := nixl.AllocBuffer(8192)
	require.NoError(t, err)
	defer dst.Free()
	require.NoError(t, a.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{src.RegDesc()}}, nil))
	require.NoError(t, b.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{dst.RegDesc()}}, nil))
	md, err := b.LocalMD()
	require.NoError(t, err)
	peer, err := a.LoadRemoteMD(md)
	require.NoError(t, err)
	mk := func(off uint64) nixl.XferHandle {
		h, err := a.CreateXferReq(nixl.Write, nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{src.Desc(off, 4096)}},
			nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{dst.Desc(off, 4096)}}, peer, nil)
		require.NoError(t, err)
		return h
	}
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
	fabric, _ := loopback.NewFabric()
	defer fabric.Close()
	a, _ := fabric.NewAgent("prefill")
	b, _ := fabric.NewAgent("decode")
	src, _ := nixl.AllocBuffer(8192)
	defer src.Free()
	dst, _ := nixl.AllocBuffer(8192)
	defer dst.Free()
	_ = a.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{src.RegDesc()}}, nil)
	_ = b.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{dst.RegDesc()}}, nil)
	md, _ := b.LocalMD()
	peer, _ := a.LoadRemoteMD(md)
	var reqs []nixl.XferHandle
	for off := uint64(0); off < 8192; off += 4096 {
		h, err := a.CreateXferReq(nixl.Write, nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{src.Desc(off, 4096)}},
			nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{dst.Desc(off, 4096)}}, peer, nil)
		if err != nil {
			panic(err)
		}
		reqs = append(reqs, h)
	}
	errs := make([]error, len(reqs))
	if err := nixl.ReleaseXferReqs(a, reqs, errs); err != nil {
		panic(err)
	}
	fmt.Println(errs[0], errs[1])
	// Output: <nil> <nil>
}
