package pushconn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/groupids/grouptest"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// groupRig is a rig of a grouped shape (grouptest.Geometry): every rank's
// layout is the shape's geometry at its side's TP size and block size.
type groupRig struct {
	*rig
	pre, dec []grouptest.Rank
	// withTokens makes push register with withTokens(the request's
	// tokens), so decode counts its prefix hits.
	withTokens bool
}

// newGroupRig builds it; vllm runs both engines in vLLM's protocol. The
// error is the first construction error (the rig is closed at cleanup).
func newGroupRig(t *testing.T, shape string, preTP, preBS, decTP, decBS int, vllm bool) (*groupRig, error) {
	t.Helper()
	return newGroupRigOpts(t, shape, preTP, preBS, decTP, decBS, groupRigOpts{vllm: vllm})
}

// groupRigOpts are newGroupRigOpts' options: the fabric's, the ranks'
// clock (default: the rig's manual clock) and changes to every rank's
// Config, then to one side's.
type groupRigOpts struct {
	vllm             bool
	fabric           []loopback.FabricOption
	clock            connector.Clock
	rank             func(*Config)
	preRank, decRank func(*Config)
}

// newGroupRigOpts is newGroupRig with options.
func newGroupRigOpts(t *testing.T, shape string, preTP, preBS, decTP, decBS int, o groupRigOpts) (*groupRig, error) {
	t.Helper()
	vllm := o.vllm
	var bufs []*nixl.Buffer
	t.Cleanup(func() {
		for _, b := range bufs {
			_ = b.Free()
		}
	})
	pg, dg := grouptest.Geometry(shape, preTP, preBS), grouptest.Geometry(shape, decTP, decBS)
	// A side's ranks' block order is its engine's (Geometry.Order), as
	// the rank's config requires.
	pg.Order, dg.Order = rankOrder(o.preRank), rankOrder(o.decRank)
	pcfg := connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg}
	dcfg := connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: dg}
	if vllm {
		pg.KVPacked, dg.KVPacked = true, true
		pcfg = connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg, Protocol: connector.ProtocolVLLM, VLLM: rigVLLM, ListenAddr: "127.0.0.1:0"}
		dcfg = connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: dg, Protocol: connector.ProtocolVLLM, VLLM: rigVLLM, ListenAddr: "127.0.0.1:0"}
	}
	f, err := loopback.NewFabric(o.fabric...)
	require.NoError(t, err)
	r := &rig{t: t, fabric: f, clock: connector.NewManualClock(rigStart)}
	clock := o.clock
	if clock == nil {
		clock = r.clock
	}
	pcfg.Clock, dcfg.Clock = clock, clock
	g := &groupRig{rig: r}
	r.pre, err = NewEngine(pcfg)
	require.NoError(t, err)
	r.dec, err = NewEngine(dcfg)
	require.NoError(t, err)
	t.Cleanup(r.close)
	for _, s := range []struct {
		geo  descriptors.Geometry
		name string
	}{{pg, "prefill"}, {dg, "decode"}} {
		for rank := range s.geo.TPSize {
			a, err := r.fabric.NewAgent(fmt.Sprintf("g%s-%d", s.name, rank))
			require.NoError(t, err)
			buf, err := nixl.AllocBuffer(int(s.geo.RankBytes()))
			require.NoError(t, err)
			bufs = append(bufs, buf)
			l, err := s.geo.Layout(nixl.DRAM, rank, buf.RegDesc().Desc)
			require.NoError(t, err)
			cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, Clock: clock, IdleInterval: 5 * time.Millisecond}}
			if o.rank != nil {
				o.rank(&cfg)
			}
			if side := map[string]func(*Config){"prefill": o.preRank, "decode": o.decRank}[s.name]; side != nil {
				side(&cfg)
			}
			gr := grouptest.Rank{L: &l, Mem: buf.Bytes(), Base: buf.Addr()}
			if s.name == "prefill" {
				p, err := NewProducer(r.pre, cfg)
				if err != nil {
					return g, err
				}
				r.preAgents, r.preLayout, r.producers = append(r.preAgents, a), append(r.preLayout, l), append(r.producers, p)
				g.pre = append(g.pre, gr)
			} else {
				c, err := NewConsumer(r.dec, cfg)
				if err != nil {
					return g, err
				}
				r.decAgents, r.decLayout, r.consumers = append(r.decAgents, a), append(r.decLayout, l), append(r.consumers, c)
				g.dec = append(g.dec, gr)
			}
		}
	}
	// Each Rank's layout points at the rig's copy, which never moves.
	for i := range g.pre {
		g.pre[i].L = &r.preLayout[i]
	}
	for i := range g.dec {
		g.dec[i].L = &r.decLayout[i]
	}
	return g, nil
}

// groupReq is one grouped request: its tokens and both sides' lists.
type groupReq struct {
	tokens   int
	src, dst [][]int
}

// groupReqs returns the requests every grouped test moves for shape at
// these block sizes: a request with a decode prefix hit (and, for the
// sliding window, only the window's blocks listed), one that fits one
// block, and one whose decode holds the attention blocks already (for the
// hybrid: only the state moves; for the window: nothing).
func groupReqs(shape string, srcBS, dstBS int) []groupReq {
	ids := func(first, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = first + i
		}
		return out
	}
	blocks := func(tokens, bs int) int { return (tokens + bs - 1) / bs }
	window := func(tokens, bs int) int { // blocks holding the last 24 tokens
		return (tokens-1)/bs - max(tokens-24, 0)/bs + 1
	}
	var out []groupReq
	for _, tokens := range []int{70, 5} {
		ns, nd := blocks(tokens, srcBS), blocks(tokens, dstBS)
		hit := 0
		if nd > 1 {
			hit = 1 // decode holds the first block of the full group
		}
		r := groupReq{tokens: tokens, src: [][]int{ids(1, ns)}, dst: [][]int{ids(20-nd, nd-hit)}}
		switch shape {
		case "swa":
			r.src = append(r.src, ids(10, window(tokens, srcBS)))
			r.dst = append(r.dst, ids(24, window(tokens, dstBS)))
		case "hybrid":
			r.src, r.dst = append(r.src, []int{9}), append(r.dst, []int{3})
		}
		out = append(out, r)
	}
	last := groupReq{tokens: 40, src: [][]int{ids(1, blocks(40, srcBS)), ids(10, window(40, srcBS))}, dst: [][]int{{}, {}}}
	if shape == "hybrid" {
		last.src[1], last.dst[1] = []int{9}, []int{5}
	}
	return append(out, last)
}

// TestGroupsPush moves grouped requests (a sliding-window model, a hybrid
// attention + Mamba model) at TP 2->2, 2->1 and 1->2 and equal and
// different block sizes, registration first and finish first, and checks
// every byte of every decode rank: the request's tokens and state where
// the model places them, and the whole memory against the descriptors'
// mapping (nothing written anywhere else).
func TestGroupsPush(t *testing.T) {
	for _, shape := range grouptest.Shapes {
		for _, tc := range []struct{ ptp, pbs, dtp, dbs int }{
			{2, 16, 2, 16}, {2, 16, 1, 16}, {1, 16, 2, 16}, {2, 16, 2, 8}, {1, 8, 2, 16},
		} {
			t.Run(fmt.Sprintf("%s/tp%d-bs%d_to_tp%d-bs%d", shape, tc.ptp, tc.pbs, tc.dtp, tc.dbs), func(t *testing.T) {
				g, err := newGroupRig(t, shape, tc.ptp, tc.pbs, tc.dtp, tc.dbs, false)
				require.NoError(t, err)
				for i, r := range groupReqs(shape, tc.pbs, tc.dbs) {
					g.push(fmt.Sprintf("req-%d", i), i+1, r, i%2 == 0)
				}
			})
		}
	}
}

// push moves one grouped request and checks every decode byte and the
// release on prefill.
func (g *groupRig) push(id string, seed int, r groupReq, registerFirst bool) {
	t := g.t
	t.Helper()
	for _, s := range g.pre {
		grouptest.Fill(seed, s, r.src, r.tokens)
	}
	req := descriptors.GroupRequest{Tokens: r.tokens, Src: r.src, Dst: r.dst}
	want := make([][]byte, len(g.dec))
	for i, d := range g.dec {
		var err error
		want[i], err = grouptest.Expect(g.pre, d, d.Mem, req)
		require.NoError(t, err)
	}
	register := func() {
		for _, c := range g.consumers {
			var opts []requestOption
			if g.withTokens {
				opts = append(opts, withTokens(r.tokens))
			}
			require.NoError(t, c.RegisterGroups(id, Coordinates(g.rig.pre), r.dst, opts...))
		}
	}
	finish := func() {
		var first Params
		for i, p := range g.producers {
			params, err := p.RequestFinishedGroups(id, r.tokens, r.src)
			require.NoError(t, err)
			if i == 0 {
				first = params
			}
			require.Equal(t, first, params)
		}
		raw, err := json.Marshal(first)
		require.NoError(t, err)
		require.Contains(t, string(raw), `"remote_block_ids":[[`)
		var back Params
		require.NoError(t, json.Unmarshal(raw, &back))
		require.Equal(t, first, back)
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
	for i, d := range g.dec {
		from := grouptest.Start(d.L, r.src, r.dst, r.tokens, g.pre[0].L.BlockSize, d.L.BlockSize)
		n, err := grouptest.Verify(seed, d, r.dst, r.tokens, from)
		require.NoError(t, err)
		if !groupEmpty(r.dst) {
			require.Positive(t, n)
		}
		if !bytes.Equal(want[i], d.Mem) {
			for k := range d.Mem {
				if d.Mem[k] != want[i][k] {
					t.Fatalf("decode rank %d byte %d: got %#x, the mapping gives %#x", i, k, d.Mem[k], want[i][k])
				}
			}
		}
	}
}

func groupEmpty(lists [][]int) bool {
	for _, l := range lists {
		if len(l) > 0 {
			return false
		}
	}
	return true
}

// TestGroupsPushRefused checks the grouped calls' refusals: each names
// the field and changes nothing.
func TestGroupsPushRefused(t *testing.T) {
	g, err := newGroupRig(t, "swa", 1, 16, 1, 16, false)
	require.NoError(t, err)
	p, c := g.producers[0], g.consumers[0]
	_, err = p.RequestFinished("a", []int{1, 2})
	require.ErrorIs(t, err, connector.ErrInvalid)
	require.ErrorContains(t, err, "the layout has 2 KV-cache groups: use RequestFinishedGroups")
	_, err = p.RequestFinishedGroups("a", 20, [][]int{{1, 2}})
	require.ErrorContains(t, err, "blockIDs has 1 KV-cache group lists, the layout has 2 groups")
	_, err = p.RequestFinishedGroups("a", 20, [][]int{{1, 2}, {40}})
	require.ErrorContains(t, err, "blockIDs[1][0] is 40, group 1 (sliding_window) has 32 logical blocks")
	_, err = p.RequestFinishedGroups("a", 0, [][]int{{1, 2}, {3}})
	require.ErrorContains(t, err, "tokens is 0")
	_, err = p.RequestFinishedGroups("a", 20, [][]int{{}, {}})
	require.ErrorContains(t, err, "has no blocks")
	require.Zero(t, p.Held())
	pf := Coordinates(g.rig.pre)
	require.ErrorContains(t, c.Register("x", pf, []int{1}), "use RegisterGroups")
	require.ErrorContains(t, c.RegisterGroups("x", pf, [][]int{{1}, {2}, {3}}), "blockIDs has 3 KV-cache group lists")
	require.Zero(t, c.Pending())

	// A registration whose lists the prefill's cannot feed (the decode
	// lists more full-attention blocks than the request's tokens fill)
	// ends in a PUSH_FAIL naming the mapping, once, and frees the blocks.
	require.NoError(t, c.RegisterGroups("y", pf, [][]int{{4, 5, 6}, {7, 8}}))
	_, err = p.RequestFinishedGroups("y", 20, [][]int{{1, 2}, {3, 4}})
	require.NoError(t, err)
	got := await(t, c, 1)
	require.Len(t, got, 1)
	require.ErrorContains(t, got[0].Err, "map prefill blocks onto decode rank 0")
	freedOnce(t, p, "y")
}

// rankOrder is the Layout.Order a rank's config option sets (apply may be
// nil).
func rankOrder(apply func(*Config)) string {
	var probe Config
	if apply != nil {
		apply(&probe)
	}
	return probe.Layout.Order
}
