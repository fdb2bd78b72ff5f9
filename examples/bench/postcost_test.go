package main

import (
	"testing"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The post cost is charged for the descriptors of the request posted, or
// for the blocks their bytes fill; the transfer itself is the agent's.
func TestPostCostCountsDescriptorsOrBlocks(t *testing.T) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	defer fab.Close()
	src, _ := nixl.AllocBuffer(4096)
	defer src.Free()
	dst, _ := nixl.AllocBuffer(4096)
	defer dst.Free()
	a0, _ := fab.NewAgent("a")
	b, _ := fab.NewAgent("b")
	require.NoError(t, a0.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{src.RegDesc()}}, nil))
	require.NoError(t, b.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{dst.RegDesc()}}, nil))
	md, _ := b.LocalMD()
	peer, err := a0.LoadRemoteMD(md)
	require.NoError(t, err)
	copy(src.Bytes(), "kv bytes")

	for _, tc := range []struct {
		blockBytes uint64
		want       int
	}{{0, 2}, {512, 6}, {1000, 4}} { // 3072 bytes
		a := withPostCost(a0, 1, tc.blockBytes).(*postCostAgent)
		h, err := a.CreateXferReq(nixl.Write,
			nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{src.Desc(0, 1024), src.Desc(1024, 2048)}},
			nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{dst.Desc(0, 1024), dst.Desc(1024, 2048)}}, peer, nil)
		require.NoError(t, err)
		assert.Equal(t, tc.want, a.descs[h], "block bytes %d", tc.blockBytes)
		_, err = a.PostXferReq(h, nil)
		require.NoError(t, err)
		require.NoError(t, a.ReleaseXferReq(h))
		assert.Empty(t, a.descs)
	}
	assert.Equal(t, "kv bytes", string(dst.Bytes()[:8]))
	assert.Same(t, a0, withPostCost(a0, 0, 0), "no cost: the agent itself")
}
