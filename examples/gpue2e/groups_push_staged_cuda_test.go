//go:build nixl && cuda

package gpue2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/pushconn"
)

// TestGroupsPushStagedVRAM is TestGroupsStagedVRAM for the push
// connector: grouped requests (a two-group sliding-window model and a
// hybrid attention + Mamba model) through push's GPU staging path, both KV
// caches and every staging slot in VRAM on device 0, prefill and decode in
// this process on NIXL agents over UCX. Each decode rank registers its
// lists and offers a slot holding one group image per prefill rank that
// writes into it (staging.GroupDstImage); each prefill rank gathers its
// mapped pairs into its own slot with the GPU copier, WRITEs the image
// there in chunks, and decode scatters every group with the GPU copier
// (one block copy per attention group, one per state part). Every byte of
// every decode rank is checked: the request's tokens and state where the
// model places them, each byte the descriptors' mapping writes, and every
// byte outside the blocks decode listed unchanged; both sides' counters
// show every WRITE with something to move went through the slots.
// Beside the two shapes it runs hybrid-1kv (one KV head, replicated at
// TP 2, the state split). GONIXL_E2E_MEM=dram runs it on host memory.
func TestGroupsPushStagedVRAM(t *testing.T) {
	needDevices(t, 1)
	m, err := openMemory(0)
	require.NoError(t, err)
	defer m.close()
	// hybrid-1kv replicates its one KV head at TP 2 while the state is
	// split: a prefill rank may write a decode rank's state but not its
	// attention, so the images differ by rank.
	for _, shape := range append(append([]string{}, grouptest.Shapes...), "hybrid-1kv") {
		for _, tp := range [][2]int{{1, 1}, {2, 1}, {1, 2}, {2, 2}} {
			t.Run(fmt.Sprintf("%s/tp%d-to-tp%d", shape, tp[0], tp[1]), func(t *testing.T) {
				runGroupsPushStaged(t, m, shape, tp[0], tp[1])
			})
		}
	}
}

func runGroupsPushStaged(t *testing.T, m memory, shape string, ptp, dtp int) {
	rig := newGroupRig(t, m)
	defer rig.close()
	side := func(name string, g descriptors.Geometry) (*connector.Engine, []groupRank, []pushconn.Config) {
		e, err := pushconn.NewEngine(connector.EngineConfig{EngineID: name, Model: "m", Geometry: g, HandshakeTimeout: 10 * time.Second})
		require.NoError(t, err)
		rig.deferClose(func() { e.Close() })
		ranks, rcs := rig.ranks(name, g)
		cfgs := make([]pushconn.Config, len(rcs))
		for i, rc := range rcs {
			cfgs[i] = pushconn.Config{RankConfig: rc}
		}
		return e, ranks, cfgs
	}
	pe, pre, pcfgs := side("gpprefill", grouptest.Geometry(shape, ptp, 16))
	de, dec, dcfgs := side("gpdecode", grouptest.Geometry(shape, dtp, 16))
	var prods []*pushconn.Producer
	var cons []*pushconn.Consumer
	for _, c := range pcfgs {
		p, err := pushconn.NewProducer(pe, c)
		require.NoError(t, err)
		rig.deferClose(func() { p.Close() })
		prods = append(prods, p)
	}
	for _, c := range dcfgs {
		cn, err := pushconn.NewConsumer(de, c)
		require.NoError(t, err)
		rig.deferClose(func() { cn.Close() })
		cons = append(cons, cn)
	}
	srcs, dsts := grouptestRanks(pre), grouptestRanks(dec)
	for _, d := range dec {
		require.NoError(t, m.write(d.base, d.host))
	}
	var wantStaged uint64
	for i, tokens := range []int{70, 200, 9} {
		id, seed := fmt.Sprintf("gpreq-%d", i), 200+i
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
		before := make([][]byte, len(dsts))
		mapped := make([][]bool, len(dsts))
		for k, d := range dsts {
			var err error
			before[k] = append([]byte(nil), d.Mem...)
			want[k], err = grouptest.Expect(srcs, d, d.Mem, req)
			require.NoError(t, err)
			mapped[k] = make([]bool, len(d.Mem))
			sources, err := descriptors.Sources(srcs[0].L, d.L)
			require.NoError(t, err)
			for _, s := range sources {
				tr, err := descriptors.MapGroupsRequest(srcs[s].L, d.L, req)
				require.NoError(t, err)
				if tr.Len() > 0 {
					wantStaged++
				}
				for _, dd := range tr.Dst.Descs {
					for b := dd.Addr - d.Base; b < dd.Addr-d.Base+dd.Len; b++ {
						mapped[k][b] = true
					}
				}
			}
		}
		for _, cn := range cons {
			require.NoError(t, cn.RegisterGroups(id, pushconn.Coordinates(pe), dst))
		}
		for _, p := range prods {
			_, err := p.RequestFinishedGroups(id, tokens, src)
			require.NoError(t, err)
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
			listed := listedBytes(dsts[k], dst)
			for b := range dsts[k].Mem {
				got := dsts[k].Mem[b]
				switch {
				case mapped[k][b] && got != want[k][b]:
					t.Fatalf("request %s: decode rank %d byte %d: got %#x, the mapping writes %#x", id, k, b, got, want[k][b])
				case !mapped[k][b] && !listed[b] && got != before[k][b]:
					t.Fatalf("request %s: decode rank %d byte %d, in no block the request lists, changed: %#x -> %#x", id, k, b, before[k][b], got)
				}
			}
		}
		for k, p := range prods {
			for len(p.DrainFreed()) == 0 {
				require.True(t, time.Now().Before(deadline), "prefill rank %d: request %s not freed", k, id)
				time.Sleep(time.Millisecond)
			}
		}
	}
	var pre1, dec1 uint64
	for _, p := range prods {
		pre1 += counter(p.Stats(), "staged_transfers")
	}
	for _, cn := range cons {
		dec1 += counter(cn.Stats(), "staged_transfers")
	}
	require.Positive(t, wantStaged)
	require.Equal(t, wantStaged, pre1, "prefill staged every WRITE with something to move")
	require.Equal(t, wantStaged, dec1, "decode scattered every staged part")
}

// listedBytes marks the bytes of the blocks (state slots) rank r lists:
// the only bytes besides the mapped ones that a staged scatter may write
// (a listed block's whole run of its image, the padding past the last
// token included).
func listedBytes(r grouptest.Rank, lists [][]int) []bool {
	out := make([]bool, len(r.Mem))
	l := r.L
	for gi, g := range l.GroupList() {
		for _, reg := range g.Regions {
			lbl := l.BlockLenOf(reg) * uint64(max(g.PhysicalPerLogical, 1))
			for _, b := range lists[gi] {
				off := l.Regions[reg].Base - r.Base + uint64(b)*lbl
				for k := off; k < off+lbl; k++ {
					out[k] = true
				}
			}
		}
	}
	return out
}
