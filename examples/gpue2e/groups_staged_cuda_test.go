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
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pullconn"
)

// groupRank is one rank of TestGroupsStagedVRAM: its KV cache and staging
// slots in device memory, and a host copy of the cache to fill and check.
type groupRank struct {
	base, slots uint64
	layout      descriptors.Layout
	host        []byte
}

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
	const slotBytes, slots = 1 << 20, 2
	var gpu *connector.GPUCopier
	if m.mem() == nixl.VRAM {
		var err error
		gpu, err = connector.NewGPUCopier(0)
		require.NoError(t, err)
		defer gpu.Close()
	}
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	side := func(name string, g descriptors.Geometry, apply func(*pullconn.Config)) (*connector.Engine, []groupRank, []pullconn.Config) {
		e, err := pullconn.NewEngine(connector.EngineConfig{EngineID: name, Model: "m", Geometry: g, HandshakeTimeout: 10 * time.Second})
		require.NoError(t, err)
		cleanups = append(cleanups, func() { e.Close() })
		var ranks []groupRank
		var cfgs []pullconn.Config
		for r := range g.TPSize {
			base, err := m.alloc(g.RankBytes())
			require.NoError(t, err)
			sl, err := m.alloc(slots * slotBytes)
			require.NoError(t, err)
			cleanups = append(cleanups, func() { m.free(base); m.free(sl) })
			l, err := g.Layout(m.mem(), r, nixl.Desc{Addr: base, Len: g.RankBytes(), DevID: m.devID()})
			require.NoError(t, err)
			a, err := newAgent(t, fmt.Sprintf("%s-%s-%d", name, t.Name(), r), m)
			require.NoError(t, err)
			cleanups = append(cleanups, func() { a.Close() })
			st := connector.Staging{Mode: connector.StagingOn, Mem: m.mem(), Base: sl, DevID: m.devID(), SlotBytes: slotBytes, Slots: slots}
			if gpu != nil {
				st.Copier = gpu
			}
			cfg := pullconn.Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1, PollInterval: pollInterval(), Staging: st}}
			if apply != nil {
				apply(&cfg)
			}
			ranks = append(ranks, groupRank{base: base, slots: sl, layout: l, host: bytes.Repeat([]byte{grouptest.Poison}, int(g.RankBytes()))})
			cfgs = append(cfgs, cfg)
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
		cleanups = append(cleanups, func() { p.Close() })
		prods = append(prods, p)
	}
	for _, c := range dcfgs {
		cn, err := pullconn.NewConsumer(de, c)
		require.NoError(t, err)
		cleanups = append(cleanups, func() { cn.Close() })
		cons = append(cons, cn)
	}
	gr := func(rs []groupRank) []grouptest.Rank {
		out := make([]grouptest.Rank, len(rs))
		for i := range rs {
			out[i] = grouptest.Rank{L: &rs[i].layout, Mem: rs[i].host, Base: rs[i].base}
		}
		return out
	}
	srcs, dsts := gr(pre), gr(dec)
	for _, d := range dec {
		require.NoError(t, m.write(d.base, d.host))
	}
	ids := func(first, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = first + i
		}
		return out
	}
	for i, tokens := range []int{70, 200, 9} {
		id, seed := fmt.Sprintf("greq-%d", i), 100+i
		pc := grouptest.Counts(srcs[0].L, tokens, 16, 0)
		dc := grouptest.Counts(dsts[0].L, tokens, 16, min(1, pc[0]-1)) // a decode prefix hit of one block when it can
		src, dst := make([][]int, len(pc)), make([][]int, len(dc))
		for g := range pc {
			src[g], dst[g] = ids(2*g, pc[g]), ids(31-dc[g]-g, dc[g])
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
