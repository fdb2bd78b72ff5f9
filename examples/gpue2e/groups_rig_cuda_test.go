//go:build nixl && cuda

package gpue2e

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/nixl"
)

// groupRank is one rank of the grouped staging tests (TestGroupsStagedVRAM,
// TestGroupsPushStagedVRAM): its KV cache and staging slots in device
// memory, and a host copy of the cache to fill and check.
type groupRank struct {
	base, slots uint64
	layout      descriptors.Layout
	host        []byte
}

// The grouped staging tests' slots: two of 1 MiB a rank.
const groupSlotBytes, groupSlots = 1 << 20, 2

// groupRig holds what the grouped staging tests set up around one
// connector pair: the GPU copier (nil on host memory: Go's copy) and the
// closers, run in reverse order by close.
type groupRig struct {
	t        *testing.T
	m        memory
	gpu      *connector.GPUCopier
	cleanups []func()
}

func newGroupRig(t *testing.T, m memory) *groupRig {
	g := &groupRig{t: t, m: m}
	if m.mem() == nixl.VRAM {
		gpu, err := connector.NewGPUCopier(0)
		require.NoError(t, err)
		g.gpu = gpu
	}
	return g
}

// deferClose adds a closer, run by close.
func (g *groupRig) deferClose(f func()) { g.cleanups = append(g.cleanups, f) }

// close runs the closers, last first, then closes the copier.
func (g *groupRig) close() {
	for i := len(g.cleanups) - 1; i >= 0; i-- {
		g.cleanups[i]()
	}
	if g.gpu != nil {
		g.gpu.Close()
	}
}

// ranks allocates the ranks of one engine of geometry geo, named name: each
// rank's KV cache and staging slots, its agent, and its RankConfig staging
// every request (StagingOn) through the rig's copier.
func (g *groupRig) ranks(name string, geo descriptors.Geometry) ([]groupRank, []connector.RankConfig) {
	t, m := g.t, g.m
	var ranks []groupRank
	var rcs []connector.RankConfig
	for r := range geo.TPSize {
		base, err := m.alloc(geo.RankBytes())
		require.NoError(t, err)
		sl, err := m.alloc(groupSlots * groupSlotBytes)
		require.NoError(t, err)
		g.deferClose(func() { m.free(base); m.free(sl) })
		l, err := geo.Layout(m.mem(), r, nixl.Desc{Addr: base, Len: geo.RankBytes(), DevID: m.devID()})
		require.NoError(t, err)
		a, err := newAgent(t, fmt.Sprintf("%s-%s-%d", name, t.Name(), r), m)
		require.NoError(t, err)
		g.deferClose(func() { a.Close() })
		st := connector.Staging{Mode: connector.StagingOn, Mem: m.mem(), Base: sl, DevID: m.devID(), SlotBytes: groupSlotBytes, Slots: groupSlots}
		if g.gpu != nil {
			st.Copier = g.gpu
		}
		rcs = append(rcs, connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1, PollInterval: pollInterval(), Staging: st})
		ranks = append(ranks, groupRank{base: base, slots: sl, layout: l, host: bytes.Repeat([]byte{grouptest.Poison}, int(geo.RankBytes()))})
	}
	return ranks, rcs
}

// grouptestRanks is rs as grouptest sees ranks: layout, host copy, base.
func grouptestRanks(rs []groupRank) []grouptest.Rank {
	out := make([]grouptest.Rank, len(rs))
	for i := range rs {
		out[i] = grouptest.Rank{L: &rs[i].layout, Mem: rs[i].host, Base: rs[i].base}
	}
	return out
}

// blockRun returns the n block ids from first on.
func blockRun(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}
