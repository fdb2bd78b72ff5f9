package staging

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/nixl"
)

// groupHostRanks allocates every rank of shape at TP tp and block size bs
// in host memory, each filled with random bytes.
func groupHostRanks(t *testing.T, shape string, tp, bs int, order string, rng *rand.Rand) []grouptest.Rank {
	t.Helper()
	g := grouptest.Geometry(shape, tp, bs)
	g.Order = order
	out := make([]grouptest.Rank, tp)
	for r := range tp {
		buf, err := nixl.AllocBuffer(int(g.RankBytes()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = buf.Free() })
		l, err := g.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
		require.NoError(t, err)
		for i := range buf.Bytes() {
			buf.Bytes()[i] = byte(rng.Uint32())
		}
		out[r] = grouptest.Rank{L: &l, Mem: buf.Bytes(), Base: buf.Addr()}
	}
	return out
}

// groupPushReq is one grouped request of the push image tests.
type groupPushReq struct {
	name     string
	tokens   int
	src, dst [][]int
}

// groupPushReqs returns the requests for shape at these block sizes, with
// fragmented lists: a request with a decode prefix hit of one block, one
// ending on a block boundary of both sides (no padding tail), one that
// fits a block, one whose decode lists no attention block (for the
// hybrid only the state moves) and one whose decode lists nothing.
func groupPushReqs(shape string, pbs, dbs int, rng *rand.Rand, pre, dec *descriptors.Layout) []groupPushReq {
	lists := func(l *descriptors.Layout, tokens, bs, hit int) [][]int {
		counts := grouptest.Counts(l, tokens, bs, hit)
		out := make([][]int, len(counts))
		for g, n := range counts {
			out[g] = rng.Perm(l.NumBlocks / max(l.GroupList()[g].PhysicalPerLogical, 1))[:n]
		}
		return out
	}
	var out []groupPushReq
	for _, c := range []struct {
		name        string
		tokens, hit int
	}{{"hit", 70, 1}, {"aligned", 64, 0}, {"one-block", 5, 0}} {
		out = append(out, groupPushReq{c.name, c.tokens, lists(pre, c.tokens, pbs, 0), lists(dec, c.tokens, dbs, c.hit)})
	}
	held := groupPushReq{"decode-holds-attention", 40, lists(pre, 40, pbs, 0), lists(dec, 40, dbs, 0)}
	none := groupPushReq{"decode-lists-nothing", 40, held.src, make([][]int, len(held.dst))}
	held.dst[0] = nil
	if shape == "swa" { // nothing left: the window lies in the attention blocks decode holds
		held.dst[1] = nil
		return append(out, none)
	}
	return append(out, held, none)
}

// TestGroupDstImageBytes stages grouped requests on the push path, on
// host memory: for every destination rank and every source rank that
// writes into it, the writer's gather (PlanWriteGroups, chunk by chunk as
// SplitGather cuts it) into a slot whose stale bytes are random, the
// chunks' WRITEs into the destination's slot (one image per source rank,
// at 16-byte aligned offsets), and the scatter (ScatterBlocks, chunk by
// chunk). Then every byte of the destination is checked: each byte the
// direct mapping writes holds what it writes, every other byte is
// unchanged unless it lies in a listed block's run of an image (the
// padding past the last token, a sliding window's tokens before the
// source's list), and a request ending on both sides' block boundaries
// leaves exactly the direct path's memory.
//
// Beside the two shapes: "hybrid-1kv" (one KV head, replicated on both
// ranks at TP 2 while the state is split, so a prefill rank may feed the
// SSM group of a decode rank but not its attention group) and NHD blocks
// on prefill's side across TP sizes or on both sides at equal TP.
func TestGroupDstImageBytes(t *testing.T) {
	type order struct{ src, dst string }
	for _, shape := range append(append([]string{}, grouptest.Shapes...), "hybrid-1kv") {
		for _, g := range []geom{{2, 2, 16, 16}, {2, 1, 16, 16}, {1, 2, 16, 16}, {2, 2, 16, 8}, {1, 2, 8, 16}, {2, 1, 8, 16}} {
			orders := []order{{}}
			if shape != "hybrid-1kv" && g.srcTP != g.dstTP {
				orders = append(orders, order{descriptors.OrderNHD, ""})
			}
			if shape != "hybrid-1kv" && g.srcTP == g.dstTP {
				orders = append(orders, order{descriptors.OrderNHD, descriptors.OrderNHD})
			}
			for _, o := range orders {
				t.Run(fmt.Sprintf("%s/tp%d-bs%d-%s_to_tp%d-bs%d-%s", shape, g.srcTP, g.srcBS, cmpOr(o.src, "HND"), g.dstTP, g.dstBS, cmpOr(o.dst, "HND")), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(g.srcTP*1000+g.dstTP*100+g.srcBS+g.dstBS), uint64(len(shape)+len(o.src)+len(o.dst))))
					pre := groupHostRanks(t, shape, g.srcTP, g.srcBS, o.src, rng)
					dec := groupHostRanks(t, shape, g.dstTP, g.dstBS, o.dst, rng)
					for i, r := range groupPushReqs(shape, g.srcBS, g.dstBS, rng, pre[0].L, dec[0].L) {
						t.Run(r.name, func(t *testing.T) { stageGroupPush(t, pre, dec, r, 10+i, rng) })
					}
				})
			}
		}
	}
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

func stageGroupPush(t *testing.T, pre, dec []grouptest.Rank, r groupPushReq, seed int, rng *rand.Rand) {
	for _, s := range pre {
		grouptest.Fill(seed, s, r.src, r.tokens)
	}
	req := descriptors.GroupRequest{Tokens: r.tokens, Src: r.src, Dst: r.dst}
	empty := true
	for _, l := range r.dst {
		empty = empty && len(l) == 0
	}
	for di, d := range dec {
		before := append([]byte(nil), d.Mem...)
		want, err := grouptest.Expect(pre, d, before, req)
		require.NoError(t, err)
		sources, err := descriptors.Sources(pre[0].L, d.L)
		require.NoError(t, err)
		mapped := make([]bool, len(d.Mem))
		slack := make([]bool, len(d.Mem)) // bytes of an image's runs
		remote := slotBuf(t, 64<<10)
		var at uint64
		for _, si := range sources {
			s := pre[si]
			im, err := NewGroupDstImage(s.L, d.L, r.dst)
			require.NoError(t, err)
			tr, _, err := descriptors.MapGroups(s.L, d.L, req)
			require.NoError(t, err)
			for _, dd := range tr.Dst.Descs {
				for k := dd.Addr - d.Base; k < dd.Addr-d.Base+dd.Len; k++ {
					mapped[k] = true
				}
			}
			if empty {
				require.Zero(t, im.Size(), "nothing listed: an empty image")
				require.Zero(t, im.Regions())
				require.Empty(t, im.Chunks(1))
				require.Zero(t, tr.Len())
				continue
			}
			require.Positive(t, im.Size())
			local := slotBuf(t, 64<<10)
			stale, err := nixl.HostBytes(local.Addr, local.Len)
			require.NoError(t, err)
			for i := range stale {
				stale[i] = byte(rng.Uint32())
			}
			var p Planner
			plan, err := p.PlanWriteGroups(&tr, s.L, d.L, im, local, remote.Addr+at)
			require.NoError(t, err)
			require.Equal(t, im.Size(), plan.Bytes)
			var gathered uint64
			for _, sg := range plan.Gather {
				gathered += sg.Len
			}
			require.Equal(t, tr.Bytes, gathered, "the gather copies the mapped bytes once")
			n := ChunkCount(im.Regions(), 3)
			chunks := im.Chunks(n)
			var sum uint64
			for _, ch := range chunks {
				sum += ch.Len
			}
			require.Equal(t, im.Size(), sum, "the chunks cover the image")
			segs, err := SplitGather(plan.Gather, local.Addr, chunks)
			require.NoError(t, err)
			scatter := im.ScatterBlocks(d.L, remote.Addr+at)
			var scattered uint64
			for _, c := range scatter {
				scattered += c.Bytes()
				for _, sg := range c.Segs(nil) {
					for k := sg.Dst - d.Base; k < sg.Dst-d.Base+sg.Len; k++ {
						slack[k] = true
					}
				}
			}
			require.Equal(t, im.Size(), scattered, "the scatter copies the image once")
			for k, ch := range chunks {
				require.NoError(t, HostCopier{}.Copy(segs[k]))
				l, rm := ChunkLists(plan.Local, plan.Remote, ch)
				xferCopy(t, l, rm)
				for _, bc := range ChunkCopies(scatter, ch.R0, ch.R1) {
					require.NoError(t, HostCopier{}.CopyBlocks(bc))
				}
			}
			at += (im.Size() + 15) &^ 15
		}
		from := grouptest.Start(d.L, r.src, r.dst, r.tokens, pre[0].L.BlockSize, d.L.BlockSize)
		n, err := grouptest.Verify(seed, d, r.dst, r.tokens, from)
		require.NoError(t, err, "decode rank %d", di)
		if !empty {
			require.Positive(t, n)
		}
		var extra int
		for k := range d.Mem {
			switch {
			case mapped[k] && d.Mem[k] != want[k]:
				t.Fatalf("decode rank %d byte %d: got %#x, the mapping writes %#x", di, k, d.Mem[k], want[k])
			case !mapped[k] && !slack[k] && d.Mem[k] != before[k]:
				t.Fatalf("decode rank %d byte %d outside every image run changed: %#x -> %#x", di, k, before[k], d.Mem[k])
			case !mapped[k] && d.Mem[k] != before[k]:
				extra++
			}
		}
		if r.name == "aligned" && pre[0].L.BlockSize >= d.L.BlockSize || empty {
			require.Zero(t, extra, "decode rank %d: bytes the direct path leaves as they are", di)
		}
	}
}

// TestGroupDstImageLayout: the image of the hybrid shape at TP 2 -> 1
// holds, for source rank 1, its half of decode's heads in every listed
// attention block and its half of each state part of the slot, part by
// part; the scatter is one block copy per attention group and one per
// state part.
func TestGroupDstImageLayout(t *testing.T) {
	mk := func(tp, rank int) descriptors.Layout {
		g := grouptest.Geometry("hybrid", tp, 16)
		l, err := g.Layout(nixl.DRAM, rank, nixl.Desc{Addr: 1 << 30, Len: g.RankBytes()})
		require.NoError(t, err)
		return l
	}
	src, dst := mk(2, 1), mk(1, 0)
	im, err := NewGroupDstImage(&src, &dst, [][]int{{7, 3}, {4}})
	require.NoError(t, err)
	head := uint64(16 * 8) // 16 tokens x 8 bytes
	require.Equal(t, 4, im.Regions(), "K and V of the attention layer, 2 SSM layers")
	ssm := uint64(12 + 4 + 4 + 16) // half of conv x, B, C and of the state
	require.Equal(t, 2*2*head+2*ssm, im.Size())
	copies := im.ScatterBlocks(&dst, 0x1000)
	require.Len(t, copies, 5, "one attention copy, one per state part")
	require.Equal(t, RegionCopy{R0: 0, BlockCopy: BlockCopy{Bases: []uint64{dst.Regions[0].Base, dst.Regions[1].Base}, Blocks: []int{7, 3},
		BlockLen: 2 * head, Off: head, Len: head, Slot: 0x1000, SlotStride: 2 * head}}, copies[0])
	wantOff := []uint64{12, 24 + 4, 32 + 4, 40 + 16} // rank 1's share of each part on decode's page
	wantLen := []uint64{12, 4, 4, 16}
	var img uint64
	for k, c := range copies[1:] {
		require.Equal(t, 2, c.R0)
		require.Equal(t, []int{4}, c.Blocks)
		require.Equal(t, uint64(72), c.BlockLen, "the page: conv 24+8+8, state 32")
		require.Equal(t, wantOff[k], c.Off, "part %d", k)
		require.Equal(t, wantLen[k], c.Len, "part %d", k)
		require.Equal(t, 0x1000+4*head+img, c.Slot, "part %d", k)
		require.Equal(t, ssm, c.SlotStride)
		img += wantLen[k]
	}
	ch := im.Chunks(ChunkCount(im.Regions(), 3))
	require.Equal(t, []Chunk{{R0: 0, R1: 2, Off: 0, Len: 4 * head}, {R0: 2, R1: 3, Off: 4 * head, Len: ssm}, {R0: 3, R1: 4, Off: 4*head + ssm, Len: ssm}}, ch)
	part := ChunkCopies(copies, 1, 3)
	require.Len(t, part, 5, "the attention V region and the first SSM layer's four parts")
	require.Equal(t, []uint64{dst.Regions[1].Base}, part[0].Bases)
	require.Equal(t, 0x1000+2*head, part[0].Slot)
	require.Equal(t, []uint64{dst.Regions[2].Base}, part[1].Bases)

	// The hybrid's decode lists no attention block: only the state.
	im, err = NewGroupDstImage(&src, &dst, [][]int{{}, {4}})
	require.NoError(t, err)
	require.Equal(t, 2, im.Regions())
	require.Equal(t, 2*ssm, im.Size())
}

// A layout without groups is one group: its group image is its DstImage,
// byte for byte, so both sides agree whichever one a side builds.
func TestGroupDstImageOneGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, g := range geoms {
		for _, s := range []int{0, g.srcTP - 1} {
			src, _ := hostLayout(t, g.srcTP, s, g.srcBS, 16, rng)
			dst, _ := hostLayout(t, g.dstTP, g.dstTP-1, g.dstBS, 16, rng)
			if srcs, err := descriptors.Sources(&src, &dst); err != nil || srcs[0] > s || srcs[len(srcs)-1] < s {
				continue
			}
			blocks := []int{9, 2, 3, 11}
			single, err := NewDstImage(&src, &dst, len(blocks))
			require.NoError(t, err)
			im, err := NewGroupDstImage(&src, &dst, [][]int{blocks})
			require.NoError(t, err)
			require.Equal(t, single.Size(), im.Size())
			require.Equal(t, single.Regions, im.Regions())
			n := ChunkCount(single.Regions, 3)
			require.Equal(t, ImageChunks(single.Regions, n, uint64(single.Blocks)*single.PerBlock, single.Size()), im.Chunks(n))
			require.Equal(t, []RegionCopy{{BlockCopy: single.ScatterBlocks(&dst, blocks, 0x40)}}, im.ScatterBlocks(&dst, 0x40))
		}
	}
}

// TestGroupDstImageRefusals: what the grouped push image refuses, each
// naming what is wrong.
func TestGroupDstImageRefusals(t *testing.T) {
	src := groupLayout(t)
	dst := groupLayout(t)
	_, err := NewGroupDstImage(&src, &dst, [][]int{{1}})
	require.EqualError(t, err, "staging: 1 group lists for 2 destination groups and 2 source groups")
	shared := dst
	shared.Groups = append([]descriptors.Group(nil), dst.Groups...)
	shared.Groups[1].Regions = []int{0, 2}
	_, err = NewGroupDstImage(&src, &shared, [][]int{{1}, {2}})
	require.EqualError(t, err, "staging: region 0 is shared by groups 0 and 1: not staged")

	im, err := NewGroupDstImage(&src, &dst, [][]int{{}, {2}})
	require.NoError(t, err)
	// A pair of the attention group: its blocks are not in the image.
	tr, _, err := descriptors.MapGroups(&src, &dst, descriptors.GroupRequest{Tokens: 20, Src: [][]int{{1, 2}, {5}}, Dst: [][]int{{3, 4}, {2}}})
	require.NoError(t, err)
	var p Planner
	_, err = p.PlanWriteGroups(&tr, &src, &dst, im, Slot{Addr: 0x10, Len: 1 << 20}, 0)
	require.ErrorContains(t, err, "in no region of the image")
	// A state slot the image does not hold.
	tr, _, err = descriptors.MapGroups(&src, &dst, descriptors.GroupRequest{Tokens: 20, Src: [][]int{{}, {5}}, Dst: [][]int{{}, {6}}})
	require.NoError(t, err)
	_, err = p.PlanWriteGroups(&tr, &src, &dst, im, Slot{Addr: 0x10, Len: 1 << 20}, 0)
	require.EqualError(t, err, "staging: destination block 6 of region 2 is not in the image")
	_, err = p.PlanWriteGroups(&tr, &src, &dst, im, Slot{Addr: 0x10, Len: 8}, 0)
	require.EqualError(t, err, "staging: image of 144 bytes does not fit a slot of 8")
	empty, err := NewGroupDstImage(&src, &dst, [][]int{{}, {}})
	require.NoError(t, err)
	_, err = p.PlanWriteGroups(&tr, &src, &dst, empty, Slot{Addr: 0x10, Len: 1 << 20}, 0)
	require.EqualError(t, err, "staging: the image is empty")
}

// An NHD destination holds a source rank's heads in one run per token:
// across TP sizes neither image can name them as one run per block, so
// both refuse (the connectors write such a request directly); at equal TP
// the image is whole blocks and NHD is fine.
func TestDstImageNHD(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	src, _ := hostLayout(t, 2, 0, 16, 8, rng)
	dst, _ := hostLayout(t, 1, 0, 16, 8, rng)
	dst.Order = descriptors.OrderNHD
	_, err := NewDstImage(&src, &dst, 2)
	require.EqualError(t, err, "staging: NHD destination blocks hold a source rank's heads in one run per token, not per block: not staged")
	_, err = NewGroupDstImage(&src, &dst, [][]int{{1, 2}})
	require.EqualError(t, err, "staging: group 0 (full): NHD destination blocks hold a source rank's heads in one run per token, not per block: not staged")
	same, _ := hostLayout(t, 1, 0, 16, 8, rng)
	same.Order = descriptors.OrderNHD
	im, err := NewDstImage(&same, &dst, 2)
	require.NoError(t, err)
	require.Equal(t, dst.BlockLen(), im.PerBlock)
	gim, err := NewGroupDstImage(&same, &dst, [][]int{{1, 2}})
	require.NoError(t, err)
	require.Equal(t, im.Size(), gim.Size())
}
