package pushconn

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/stagingtest"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// TestGroupsPushStaged moves grouped requests (a sliding-window model, a
// hybrid attention + Mamba model) through staging slots at TP 2->2, 2->1
// and 1->2 and equal and different block sizes, in chunks (the default,
// one per region here) and whole (Chunks 1, PUSH_STAGED): decode offers a
// slot holding one group image per prefill rank (staging.GroupDstImage),
// each prefill rank gathers its mapped pairs into its own slot and writes
// it there, and decode scatters every group. Every byte of every decode
// rank is checked (pushGroupsStaged), every WRITE with something to move
// went through the slots on both sides (exact counts), and every slot
// comes back. Beside the two shapes: "hybrid-1kv" (one KV head, replicated
// at TP 2 while the state is split: at TP 2 -> 1 one prefill rank writes
// decode's attention and both its state, so each image holds only the
// groups its rank writes), NHD blocks on prefill's side across TP sizes
// and on both sides at equal TP (staged), and an NHD decode across TP
// sizes, whose blocks hold a prefill rank's heads in one run per token:
// not staged, written directly, every byte still checked. (With prefill's
// blocks smaller, a 5-token request maps only the first half of decode's
// block, whose bytes of prefill rank 0 then lie inside that rank's run of
// an HND image: only the image's NHD refusal keeps its scatter from
// writing stale bytes over rank 1's heads.)
func TestGroupsPushStaged(t *testing.T) {
	type tcase struct {
		shape              string
		ptp, pbs, dtp, dbs int
		pOrder, dOrder     string
	}
	var cases []tcase
	for _, shape := range grouptest.Shapes {
		for _, c := range []tcase{{"", 2, 16, 2, 16, "", ""}, {"", 2, 16, 1, 16, "", ""}, {"", 1, 16, 2, 16, "", ""}, {"", 2, 16, 2, 8, "", ""}, {"", 1, 8, 2, 16, "", ""},
			{"", 2, 16, 1, 16, descriptors.OrderNHD, ""}, {"", 2, 16, 2, 16, descriptors.OrderNHD, descriptors.OrderNHD}, {"", 2, 16, 1, 16, "", descriptors.OrderNHD}, {"", 2, 8, 1, 16, "", descriptors.OrderNHD}} {
			c.shape = shape
			cases = append(cases, c)
		}
	}
	for _, tp := range [][2]int{{2, 1}, {1, 2}, {2, 2}} {
		cases = append(cases, tcase{"hybrid-1kv", tp[0], 16, tp[1], 16, "", ""})
	}
	for i, tc := range cases {
		chunks := 0
		if i%2 == 1 {
			chunks = 1
		}
		staged := tc.dOrder == "" || tc.ptp == tc.dtp
		t.Run(fmt.Sprintf("%s/tp%d-bs%d-%s_to_tp%d-bs%d-%s/chunks%d", tc.shape, tc.ptp, tc.pbs, cmpOr(tc.pOrder, "HND"), tc.dtp, tc.dbs, cmpOr(tc.dOrder, "HND"), chunks), func(t *testing.T) {
			shape := tc.shape
			m := newStagingMem(t, connector.StagingOn, 2, 64<<10)
			withChunks := func(side, order string) func(*Config) {
				return func(c *Config) {
					m.rank(side)(c)
					c.Staging.Chunks = chunks
					c.Layout.Order = order
				}
			}
			{
				g, err := newGroupRigOpts(t, shape, tc.ptp, tc.pbs, tc.dtp, tc.dbs, groupRigOpts{preRank: withChunks("prefill", tc.pOrder), decRank: withChunks("decode", tc.dOrder)})
				require.NoError(t, err)
				rng := rand.New(rand.NewPCG(uint64(i), uint64(len(shape))))
				reqs := append(groupReqs(strings.TrimSuffix(shape, "-1kv"), tc.pbs, tc.dbs), fragmentedGroupReq(rng, g, 57))
				// stateOnly are the WRITEs of requests whose decode lists no
				// attention block: their image is the state alone, staged
				// even for an NHD decode.
				var writes, stateOnly uint64
				for k, r := range reqs {
					n := g.pushGroupsStaged(fmt.Sprintf("req-%d", k), k+1, r, k%2 == 0)
					writes += n
					if attentionEmpty(g.dec[0].L, r.dst) {
						stateOnly += n
					}
				}
				require.Positive(t, writes)
				var pre, dec, direct uint64
				for _, p := range g.producers {
					pre += extra(t, p.Stats(), "staged_transfers")
					direct += extra(t, p.Stats(), "direct_transfers")
					require.Zero(t, extra(t, p.Stats(), "staging_no_slot"))
				}
				for _, c := range g.consumers {
					dec += extra(t, c.Stats(), "staged_transfers")
				}
				if !staged {
					require.Equal(t, stateOnly, pre, "an NHD decode across TP sizes takes its attention blocks directly")
					require.Equal(t, stateOnly, dec)
					require.Equal(t, writes-stateOnly, direct)
					return
				}
				require.Equal(t, writes, pre, "prefill staged every WRITE with something to move")
				require.Equal(t, writes, dec, "decode scattered every staged part")
			}
		})
	}
}

// attentionEmpty reports whether lists name no block of an attention group
// of l.
func attentionEmpty(l *descriptors.Layout, lists [][]int) bool {
	for gi, g := range l.GroupList() {
		if g.Kind != descriptors.KindSSM && len(lists[gi]) > 0 {
			return false
		}
	}
	return true
}

// fragmentedGroupReq returns a request of tokens whose lists are random
// distinct blocks on both sides (a decode prefix hit of one block).
func fragmentedGroupReq(rng *rand.Rand, g *groupRig, tokens int) groupReq {
	lists := func(l *descriptors.Layout, hit int) [][]int {
		counts := grouptest.Counts(l, tokens, l.BlockSize, hit)
		out := make([][]int, len(counts))
		for k, n := range counts {
			out[k] = rng.Perm(l.NumBlocks)[:n]
		}
		return out
	}
	return groupReq{tokens: tokens, src: lists(g.pre[0].L, 0), dst: lists(g.dec[0].L, 1)}
}

// pushGroupsStaged moves one grouped request with staging on and checks
// every byte of every decode rank: each byte the descriptors' mapping
// writes holds what it writes, the request's tokens and state are where
// the model places them, and every other byte is as it was unless it lies
// in a block decode listed for the request (the staged scatter writes a
// listed block's whole run of its image: the padding past the last token,
// a sliding window's tokens before prefill's list). A request ending on
// both sides' block boundaries leaves exactly the direct path's memory.
// It returns how many prefill-decode rank pairs have something to move
// (the staged WRITEs), and checks that every slot came back.
func (g *groupRig) pushGroupsStaged(id string, seed int, r groupReq, registerFirst bool) uint64 {
	t := g.t
	t.Helper()
	for _, s := range g.pre {
		grouptest.Fill(seed, s, r.src, r.tokens)
	}
	req := descriptors.GroupRequest{Tokens: r.tokens, Src: r.src, Dst: r.dst}
	want := make([][]byte, len(g.dec))
	before := make([][]byte, len(g.dec))
	mapped := make([][]bool, len(g.dec))
	var pairs uint64
	for i, d := range g.dec {
		var err error
		before[i] = append([]byte(nil), d.Mem...)
		want[i], err = grouptest.Expect(g.pre, d, d.Mem, req)
		require.NoError(t, err)
		mapped[i] = make([]bool, len(d.Mem))
		sources, err := descriptors.Sources(g.pre[0].L, d.L)
		require.NoError(t, err)
		for _, s := range sources {
			tr, err := descriptors.MapGroupsRequest(g.pre[s].L, d.L, req)
			require.NoError(t, err)
			if tr.Len() > 0 {
				pairs++
			}
			for _, dd := range tr.Dst.Descs {
				for k := dd.Addr - d.Base; k < dd.Addr-d.Base+dd.Len; k++ {
					mapped[i][k] = true
				}
			}
		}
	}
	register := func() {
		for _, c := range g.consumers {
			require.NoError(t, c.RegisterGroups(id, Coordinates(g.rig.pre), r.dst))
		}
	}
	finish := func() {
		for _, p := range g.producers {
			_, err := p.RequestFinishedGroups(id, r.tokens, r.src)
			require.NoError(t, err)
		}
	}
	if registerFirst {
		register()
		finish()
	} else {
		finish()
		register()
	}
	for i, c := range g.consumers {
		got := await(t, c, 1)
		require.Len(t, got, 1)
		require.NoError(t, got[0].Err, "decode rank %d", i)
	}
	for _, p := range g.producers {
		freedOnce(t, p, id)
	}
	eventually(t, "staging slots back", func() bool { pre, dec := inUse(g.rig); return pre+dec == 0 })
	aligned := r.tokens%g.pre[0].L.BlockSize == 0 && r.tokens%g.dec[0].L.BlockSize == 0 && g.pre[0].L.BlockSize >= g.dec[0].L.BlockSize
	for i, d := range g.dec {
		from := grouptest.Start(d.L, r.src, r.dst, r.tokens, g.pre[0].L.BlockSize, d.L.BlockSize)
		n, err := grouptest.Verify(seed, d, r.dst, r.tokens, from)
		require.NoError(t, err, "request %s", id)
		if !groupEmpty(r.dst) {
			require.Positive(t, n)
		}
		listed := listedBytes(d, r.dst)
		for k := range d.Mem {
			switch {
			case mapped[i][k] && d.Mem[k] != want[i][k]:
				t.Fatalf("request %s: decode rank %d byte %d: got %#x, the mapping writes %#x", id, i, k, d.Mem[k], want[i][k])
			case !mapped[i][k] && !listed[k] && d.Mem[k] != before[i][k]:
				t.Fatalf("request %s: decode rank %d byte %d, in no block the request lists, changed: %#x -> %#x", id, i, k, before[i][k], d.Mem[k])
			}
		}
		if aligned {
			require.True(t, bytes.Equal(want[i], d.Mem), "request %s: decode rank %d differs from the direct path", id, i)
		}
	}
	return pairs
}

// listedBytes marks the bytes of the blocks (state slots) rank r lists.
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

// TestGroupsPushStagedFailures: a grouped staged WRITE whose gather, WRITE
// or scatter fails ends the request once (PUSH_FAIL transfer on decode
// for the first two, connector.ErrStaging for the scatter), frees
// prefill's blocks once and every slot on both sides; the next request
// goes through the slots again with every byte checked. The hybrid shape
// at TP 2 -> 1: the scatter is several copies (the attention group, each
// state part), the second of which fails.
func TestGroupsPushStagedFailures(t *testing.T) {
	for _, step := range []string{"gather", "transfer", "scatter"} {
		t.Run(step, func(t *testing.T) {
			m := newStagingMem(t, connector.StagingOn, 1, 64<<10)
			bad := map[string]connector.Copier{}
			if step == "gather" {
				bad["prefill"] = &stagingtest.Copier{FailAt: 1}
			}
			if step == "scatter" {
				bad["decode"] = &stagingtest.Copier{FailAt: 2}
			}
			m.copier = func(side string) connector.Copier {
				if c := bad[side]; c != nil {
					return c
				}
				return staging.HostCopier{}
			}
			g, err := newGroupRigOpts(t, "hybrid", 2, 16, 1, 16, groupRigOpts{preRank: m.rank("prefill"), decRank: m.rank("decode")})
			require.NoError(t, err)
			if step == "transfer" {
				_, err := g.fabric.AddFault(loopback.Fault{Kind: loopback.FailInFlight, From: "gprefill-1", Count: 1})
				require.NoError(t, err)
			}
			c := g.consumers[0]
			r := groupReqs("hybrid", 16, 16)[0]
			require.NoError(t, c.RegisterGroups("x", Coordinates(g.rig.pre), r.dst))
			for _, p := range g.producers {
				_, err := p.RequestFinishedGroups("x", r.tokens, r.src)
				require.NoError(t, err)
			}
			res := await(t, c, 1)
			require.Len(t, res, 1)
			switch step {
			case "scatter":
				require.ErrorIs(t, res[0].Err, connector.ErrStaging)
			default:
				require.True(t, isPushFail(res[0].Err, "transfer"), "err = %v", res[0].Err)
			}
			// A prefill rank that had not written when decode failed the
			// request is cancelled and frees its blocks at its lease's
			// end.
			g.clock.Advance(time.Hour)
			for _, p := range g.producers {
				freedOnce(t, p, "x")
			}
			var failures uint64
			for _, p := range g.producers {
				failures += extra(t, p.Stats(), "staging_failures")
			}
			failures += extra(t, c.Stats(), "staging_failures")
			if step != "transfer" {
				require.Equal(t, uint64(1), failures)
			}
			eventually(t, "staging slots back", func() bool { pre, dec := inUse(g.rig); return pre+dec == 0 })
			// The next request goes through the slots again.
			before := extra(t, c.Stats(), "staged_transfers")
			require.EqualValues(t, 2, g.pushGroupsStaged("y", 7, groupReqs("hybrid", 16, 16)[1], true))
			require.Equal(t, before+2, extra(t, c.Stats(), "staged_transfers"))
		})
	}
}
