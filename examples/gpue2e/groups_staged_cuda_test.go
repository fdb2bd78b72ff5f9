//go:build nixl && cuda

package gpue2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/pullconn"
)

// TestGroupsStagedVRAM moves grouped requests (a two-group sliding-window
// model and a hybrid attention + Mamba model) through the pull
// connector's GPU staging path, both KV caches and every staging slot in
// VRAM on device 0, prefill and decode in this process on NIXL agents
// over UCX: each prefill rank gathers every group's listed blocks into its
// slot with the GPU copier (one block copy per group), each decode rank
// reads the parts it needs into its slot and scatters them into its
// groups' blocks with the GPU copier. Every byte of every decode rank is
// checked against the model's fill and against the descriptors' mapping
// of the whole cache, and both sides' counters show the slots were used.
// GONIXL_E2E_MEM=dram runs it on host memory.
func TestGroupsStagedVRAM(t *testing.T) {
	needDevices(t, 1)
	m, err := openMemory(0)
	require.NoError(t, err)
	defer m.close()
	for _, shape := range grouptest.Shapes {
		for _, tp := range [][2]int{{1, 1}, {2, 1}, {1, 2}, {2, 2}} {
			t.Run(fmt.Sprintf("%s/tp%d-to-tp%d", shape, tp[0], tp[1]), func(t *testing.T) {
				runGroupsStaged(t, m, shape, tp[0], tp[1])
			})
		}
	}
}

func runGroupsStaged(t *testing.T, m memory, shape string, ptp, dtp int) {
	rig := newGroupRig(t, m)
	defer rig.close()
	side := func(name string, g descriptors.Geometry, apply func(*pullconn.Config)) (*connector.Engine, []groupRank, []pullconn.Config) {
		e, err := pullconn.NewEngine(connector.EngineConfig{EngineID: name, Model: "m", Geometry: g, HandshakeTimeout: 10 * time.Second})
		require.NoError(t, err)
		rig.deferClose(func() { e.Close() })
		ranks, rcs := rig.ranks(name, g)
		cfgs := make([]pullconn.Config, len(rcs))
		for i, rc := range rcs {
			cfgs[i] = pullconn.Config{RankConfig: rc}
			if apply != nil {
				apply(&cfgs[i])
			}
		}
		return e, ranks, cfgs
	}
	pe, pre, pcfgs := side("gprefill", grouptest.Geometry(shape, ptp, 16), func(c *pullconn.Config) { c.ParamsAfterAllRanks = true })
	de, dec, dcfgs := side("gdecode", grouptest.Geometry(shape, dtp, 16), nil)
	var prods []*pullconn.Producer
	var cons []*pullconn.Consumer
	for _, c := range pcfgs {
		p, err := pullconn.NewProducer(pe, c)
		require.NoError(t, err)
		rig.deferClose(func() { p.Close() })
		prods = append(prods, p)
	}
	for _, c := range dcfgs {
		cn, err := pullconn.NewConsumer(de, c)
		require.NoError(t, err)
		rig.deferClose(func() { cn.Close() })
		cons = append(cons, cn)
	}
	srcs, dsts := grouptestRanks(pre), grouptestRanks(dec)
	for _, d := range dec {
		require.NoError(t, m.write(d.base, d.host))
	}
	for i, tokens := range []int{70, 200, 9} {
		id, seed := fmt.Sprintf("greq-%d", i), 100+i
		pc := grouptest.Counts(srcs[0].L, tokens, 16, 0)
		dc := grouptest.Counts(dsts[0].L, tokens, 16, min(1, pc[0]-1)) // a decode prefix hit of one block when it can
		src, dst := make([][]int, len(pc)), make([][]int, len(dc))
		for g := range pc {
			src[g], dst[g] = blockRun(2*g, pc[g]), blockRun(31-dc[g]-g, dc[g])
		}
		for _, s := range srcs {
			grouptest.Fill(seed, s, src, tokens)
		}
		for k, s := range pre {
			require.NoError(t, m.write(s.base, srcs[k].Mem))
		}
		req := descriptors.GroupRequest{Tokens: tokens, Src: src, Dst: dst}
		want := make([][]byte, len(dsts))
		for k, d := range dsts {
			var err error
			want[k], err = grouptest.Expect(srcs, d, d.Mem, req)
			require.NoError(t, err)
		}
		var params pullconn.Params
		for k, p := range prods {
			ps, err := p.RequestFinishedGroups(id, tokens, src)
			require.NoError(t, err)
			if k == 0 {
				params = ps
			}
		}
		require.NotNil(t, params.RemoteStagingSlot, "prefill staged the request")
		for _, cn := range cons {
			require.NoError(t, cn.LoadGroups(id, params, dst))
		}
		deadline := time.Now().Add(30 * time.Second)
		for k, cn := range cons {
			for {
				rs := cn.Drain()
				if len(rs) == 1 {
					require.NoError(t, rs[0].Err, "decode rank %d", k)
					break
				}
				require.Empty(t, rs)
				require.True(t, time.Now().Before(deadline), "decode rank %d: no result", k)
				time.Sleep(time.Millisecond)
			}
		}
		for k, d := range dec {
			require.NoError(t, m.read(dsts[k].Mem, d.base))
			from := grouptest.Start(dsts[k].L, src, dst, tokens, 16, 16)
			n, err := grouptest.Verify(seed, dsts[k], dst, tokens, from)
			require.NoError(t, err, "request %s", id)
			require.Positive(t, n)
			require.True(t, bytes.Equal(want[k], dsts[k].Mem), "request %s: decode rank %d differs from the mapping outside the checked bytes", id, k)
		}
		for _, p := range prods {
			for time.Now().Before(deadline) && len(p.DrainFreed()) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for k, p := range prods {
		require.EqualValues(t, 3, counter(p.Stats(), "staged_transfers"), "prefill rank %d gathers", k)
	}
	for k, cn := range cons {
		require.Positive(t, counter(cn.Stats(), "staged_transfers"), "decode rank %d staged READs", k)
	}
}
