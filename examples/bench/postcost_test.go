package main

import (
	"testing"
	"time"

	"github.com/gonixl/gonixl/connector"
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
		a := withPostCost(a0, 1, tc.blockBytes, nil).(*postCostAgent)
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
	assert.Same(t, a0, withPostCost(a0, 0, 0, nil), "no cost: the agent itself")
	// A descriptor in staging memory is one descriptor even per block:
	// the first (1024 bytes) here, the second charged per 512 bytes.
	ranges := &stagingRanges{}
	ranges.add(src.Desc(0, 1024))
	a := withPostCost(a0, 1, 512, ranges).(*postCostAgent)
	h, err := a.CreateXferReq(nixl.Write,
		nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{src.Desc(0, 1024), src.Desc(1024, 2048)}},
		nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{dst.Desc(0, 1024), dst.Desc(1024, 2048)}}, peer, nil)
	require.NoError(t, err)
	assert.Equal(t, 1+4, a.descs[h])
	require.NoError(t, a.ReleaseXferReq(h))
}

func TestGatherCostCopier(t *testing.T) {
	src, _ := nixl.AllocBuffer(2048)
	defer src.Free()
	dst, _ := nixl.AllocBuffer(2048)
	defer dst.Free()
	copy(src.Bytes(), "gathered")
	c := gatherCostCopier{perBlock: time.Nanosecond, blockBytes: 1024}
	require.NoError(t, c.Copy([]connector.Seg{{Src: src.Desc(0, 8).Addr, Dst: dst.Desc(100, 8).Addr, Len: 8}}))
	assert.Equal(t, "gathered", string(dst.Bytes()[100:108]))
	err := c.Copy([]connector.Seg{{Src: 1, Dst: dst.Desc(0, 8).Addr, Len: 8}})
	require.ErrorContains(t, err, "gather segment 0: source")
}
