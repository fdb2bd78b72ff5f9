package pullconn

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

// newGroupCluster is newCluster for a grouped shape (grouptest.Geometry):
// every rank's layout is the shape's geometry at its TP size and block
// size.
func newGroupCluster(t *testing.T, shape string, prefill, decode side, vllm bool) (*cluster, error) {
	t.Helper()
	return newGroupClusterOpts(t, shape, prefill, decode, groupOpts{vllm: vllm})
}

// groupOpts are newGroupClusterOpts' options: the fabric's, and changes
// to every prefill and decode rank's Config.
type groupOpts struct {
	vllm                  bool
	fabric                []loopback.FabricOption
	prefillCfg, decodeCfg func(*Config)
}

// newGroupClusterOpts is newGroupCluster with options.
func newGroupClusterOpts(t *testing.T, shape string, prefill, decode side, o groupOpts) (*cluster, error) {
	t.Helper()
	vllm := o.vllm
	fab, err := loopback.NewFabric(o.fabric...)
	require.NoError(t, err)
	c := &cluster{t: t, fab: fab}
	t.Cleanup(c.close)
	pg, dg := grouptest.Geometry(shape, prefill.tp, prefill.bs), grouptest.Geometry(shape, decode.tp, decode.bs)
	// A side's ranks' block order is its engine's (Geometry.Order), as
	// the rank's config requires.
	pg.Order, dg.Order = rankOrder(o.prefillCfg), rankOrder(o.decodeCfg)
	// Each engine runs on the clock its ranks use, as RankConfig.Clock
	// requires.
	rankClock := func(apply func(*Config)) connector.Clock {
		var probe Config
		if apply != nil {
			apply(&probe)
		}
		return probe.Clock
	}
	pcfg := connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg, Clock: rankClock(o.prefillCfg)}
	dcfg := connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: dg, HandshakeTimeout: 2 * time.Second, Clock: rankClock(o.decodeCfg)}
	if vllm {
		pg.KVPacked, dg.KVPacked = true, true
		pcfg.Geometry, dcfg.Geometry = pg, dg
		v := connector.VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}
		pcfg.Protocol, pcfg.VLLM, dcfg.Protocol, dcfg.VLLM = connector.ProtocolVLLM, v, connector.ProtocolVLLM, v
	}
	if c.pe, err = NewEngine(pcfg); err != nil {
		return c, err
	}
	if c.de, err = NewEngine(dcfg); err != nil {
		return c, err
	}
	for _, s := range []struct {
		g    descriptors.Geometry
		name string
		dec  bool
	}{{pg, "prefill", false}, {dg, "decode", true}} {
		for r := 0; r < s.g.TPSize; r++ {
			a, err := fab.NewAgent(fmt.Sprintf("%s-%d", s.name, r))
			require.NoError(t, err)
			buf, err := nixl.AllocBuffer(int(s.g.RankBytes()))
			require.NoError(t, err)
			l, err := s.g.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
			require.NoError(t, err)
			cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}}
			if apply := map[bool]func(*Config){false: o.prefillCfg, true: o.decodeCfg}[s.dec]; apply != nil {
				apply(&cfg)
			}
			if s.dec {
				c.dagents, c.dbufs, c.dlayouts = append(c.dagents, a), append(c.dbufs, buf), append(c.dlayouts, l)
				cn, err := NewConsumer(c.de, cfg)
				if err != nil {
					return c, err
				}
				c.cons = append(c.cons, cn)
			} else {
				c.pagents, c.pbufs, c.playouts = append(c.pagents, a), append(c.pbufs, buf), append(c.playouts, l)
				p, err := NewProducer(c.pe, cfg)
				if err != nil {
					return c, err
				}
				c.prods = append(c.prods, p)
			}
		}
	}
	return c, nil
}

// groupRanks returns the ranks of one side as grouptest sees them.
func groupRanks(bufs []*nixl.Buffer, ls []descriptors.Layout) []grouptest.Rank {
	out := make([]grouptest.Rank, len(bufs))
	for i := range bufs {
		out[i] = grouptest.Rank{L: &ls[i], Mem: bufs[i].Bytes(), Base: bufs[i].Addr()}
	}
	return out
}

// groupReq is one grouped request: its tokens and both sides' lists.
type groupReq struct {
	tokens   int
	src, dst [][]int
}

// groupReqs returns the requests every grouped test moves for shape at
// these block sizes: a request with a decode prefix hit (and, for the
// sliding window, only the window's blocks listed), one that fits one
// block, and one whose decode has every block already (lists empty).
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
	return append(out, groupReq{tokens: 40, src: [][]int{ids(1, blocks(40, srcBS)), {9}}, dst: [][]int{{}, {}}})
}

// TestGroupsPull moves grouped requests (a sliding-window model, a hybrid
// attention + Mamba model) at TP 2->2, 2->1 and 1->2 and equal and
// different block sizes, and checks every byte of every decode rank: the
// request's tokens and state where the model places them, and the whole
// memory against the descriptors' mapping (nothing written anywhere else).
func TestGroupsPull(t *testing.T) {
	for _, shape := range grouptest.Shapes {
		for _, tc := range []struct{ p, d side }{
			{side{2, 16}, side{2, 16}}, {side{2, 16}, side{1, 16}}, {side{1, 16}, side{2, 16}}, {side{2, 16}, side{2, 8}}, {side{1, 8}, side{2, 16}},
		} {
			t.Run(fmt.Sprintf("%s/tp%d-bs%d_to_tp%d-bs%d", shape, tc.p.tp, tc.p.bs, tc.d.tp, tc.d.bs), func(t *testing.T) {
				c, err := newGroupCluster(t, shape, tc.p, tc.d, false)
				require.NoError(t, err)
				for i, r := range groupReqs(shape, tc.p.bs, tc.d.bs) {
					id := fmt.Sprintf("req-%d", i)
					c.moveGroups(id, i+1, r)
				}
			})
		}
	}
}

// moveGroups moves one grouped request through the cluster and checks
// every decode byte and the release on prefill.
func (c *cluster) moveGroups(id string, seed int, r groupReq) {
	t := c.t
	t.Helper()
	srcs, dsts := groupRanks(c.pbufs, c.playouts), groupRanks(c.dbufs, c.dlayouts)
	for _, s := range srcs {
		grouptest.Fill(seed, s, r.src, r.tokens)
	}
	req := descriptors.GroupRequest{Tokens: r.tokens, Src: r.src, Dst: r.dst}
	want := make([][]byte, len(dsts))
	for i, d := range dsts {
		var err error
		want[i], err = grouptest.Expect(srcs, d, d.Mem, req)
		require.NoError(t, err)
	}
	var params Params
	for i, p := range c.prods {
		got, err := p.RequestFinishedGroups(id, r.tokens, r.src)
		require.NoError(t, err)
		if i == 0 {
			params = got
		}
		require.Equal(t, params, got, "every prefill rank returns the same Params")
	}
	// The Params travel as JSON, as they do through a proxy: the lists
	// as vLLM's list of lists.
	raw, err := json.Marshal(params)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"remote_block_ids":[[`)
	require.Contains(t, string(raw), fmt.Sprintf(`"remote_num_tokens":%d`, r.tokens))
	var back Params
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, params, back)
	for _, cn := range c.cons {
		require.NoError(t, cn.LoadGroups(id, back, r.dst))
	}
	for rank, res := range c.result(id) {
		require.NoError(t, res.Err, "decode rank %d", rank)
	}
	c.freed(1)
	for i, d := range dsts {
		from := grouptest.Start(d.L, r.src, r.dst, r.tokens, c.playouts[0].BlockSize, d.L.BlockSize)
		n, err := grouptest.Verify(seed, d, r.dst, r.tokens, from)
		require.NoError(t, err)
		if len(r.dst[0]) > 0 {
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

// TestGroupsPullRefused checks the grouped calls' refusals: each names
// the field, changes nothing and counts a reject.
func TestGroupsPullRefused(t *testing.T) {
	c, err := newGroupCluster(t, "hybrid", side{2, 16}, side{2, 16}, false)
	require.NoError(t, err)
	p, cn := c.prods[0], c.cons[0]
	_, err = p.RequestFinished("a", []int{1, 2})
	require.ErrorIs(t, err, connector.ErrInvalid)
	require.ErrorContains(t, err, "the layout has 2 KV-cache groups: use RequestFinishedGroups")
	_, err = p.RequestFinishedGroups("a", 20, [][]int{{1, 2}})
	require.ErrorContains(t, err, "blockIDs has 1 KV-cache group lists, the layout has 2 groups")
	_, err = p.RequestFinishedGroups("a", 20, [][]int{{1, 2}, {32}})
	require.ErrorContains(t, err, "blockIDs[1][0] is 32, group 1 (ssm) has 32 logical blocks")
	_, err = p.RequestFinishedGroups("a", -1, [][]int{{1, 2}, {3}})
	require.ErrorContains(t, err, "tokens is -1, want >= 1")
	require.Zero(t, p.Held())

	params, err := p.RequestFinishedGroups("a", 20, [][]int{{1, 2}, {3}})
	require.NoError(t, err)
	_, err = c.prods[1].RequestFinishedGroups("a", 20, [][]int{{1, 2}, {3}})
	require.NoError(t, err)
	err = cn.Load("x", params, []int{4, 5})
	require.ErrorContains(t, err, "use LoadGroups")
	err = cn.LoadGroups("x", params, [][]int{{4, 5}})
	require.ErrorContains(t, err, "Params.RemoteBlockIDs has 2 KV-cache group lists, localBlocks 1")
	err = cn.LoadGroups("x", params, [][]int{{4, 5}, {-1}})
	require.ErrorContains(t, err, "localBlocks[1][0] is -1")
	flat := params
	flat.RemoteGroupBlockIDs, flat.RemoteBlockIDs = nil, []int{1, 2}
	err = cn.LoadGroups("x", flat, [][]int{{4, 5}, {6}})
	require.ErrorContains(t, err, "the prefill did not use RequestFinishedGroups")
	rejected, _ := cn.Stats().Get("rejected_loads")
	require.EqualValues(t, 4, rejected)
	require.Zero(t, cn.Pending())
	// A request whose full-attention list is longer than its tokens: the
	// mapping refuses it on the reader, and the load fails once.
	bad := params
	bad.NumTokens = 5
	require.NoError(t, cn.LoadGroups("y", bad, [][]int{{4, 5}, {6}}))
	require.NoError(t, c.cons[1].LoadGroups("y", bad, [][]int{{4, 5}, {6}}))
	for _, res := range c.result("y") {
		require.ErrorIs(t, res.Err, connector.ErrInvalid)
	}
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
