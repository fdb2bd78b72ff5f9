//go:build nixl

package pullconn

import (
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

// newNativeVLLMGroupCluster is newVLLMGroupCluster on real NIXL agents
// (UCX over loopback, nativeAgent).
func newNativeVLLMGroupCluster(t *testing.T, shape string, prefill, decode side, porder, dorder string) *cluster {
	t.Helper()
	fab, err := loopback.NewFabric() // unused: the cluster closes one
	require.NoError(t, err)
	c := &cluster{t: t, fab: fab}
	t.Cleanup(c.close)
	pg, dg := grouptest.Geometry(shape, prefill.tp, prefill.bs), grouptest.Geometry(shape, decode.tp, decode.bs)
	pg.KVPacked, dg.KVPacked = true, true
	v := connector.VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}
	c.pe, err = NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg, Protocol: connector.ProtocolVLLM, VLLM: v})
	require.NoError(t, err)
	c.de, err = NewEngine(connector.EngineConfig{EngineID: "decode", Model: "m", Geometry: dg, Protocol: connector.ProtocolVLLM, VLLM: v, HandshakeTimeout: 5 * time.Second})
	require.NoError(t, err)
	for _, s := range []struct {
		g     descriptors.Geometry
		name  string
		order string
		dec   bool
	}{{pg, "prefill", porder, false}, {dg, "decode", dorder, true}} {
		for r := 0; r < s.g.TPSize; r++ {
			a := nativeAgent(t, fmt.Sprintf("%s-%d", s.name, r))
			buf, err := nixl.AllocBuffer(int(s.g.RankBytes()))
			require.NoError(t, err)
			l, err := s.g.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
			require.NoError(t, err)
			l.Order = s.order
			cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}}
			if s.dec {
				c.dagents, c.dbufs, c.dlayouts = append(c.dagents, a), append(c.dbufs, buf), append(c.dlayouts, l)
				cn, err := NewConsumer(c.de, cfg)
				require.NoError(t, err)
				c.cons = append(c.cons, cn)
			} else {
				c.pagents, c.pbufs, c.playouts = append(c.pagents, a), append(c.pbufs, buf), append(c.playouts, l)
				p, err := NewProducer(c.pe, cfg)
				require.NoError(t, err)
				c.prods = append(c.prods, p)
			}
		}
	}
	return c
}

// TestNativeGroupsPullVLLM: TestGroupsPullVLLM's grouped shapes in vLLM's
// protocol over real NIXL agents (UCX), TP 2->1, 1->2 and 2->2 with NHD on
// one side, every decode byte checked.
func TestNativeGroupsPullVLLM(t *testing.T) {
	for _, shape := range grouptest.Shapes {
		for _, tc := range []struct {
			p, d           side
			porder, dorder string
		}{{side{2, 16}, side{1, 16}, "", ""}, {side{1, 16}, side{2, 8}, "", ""}, {side{2, 16}, side{2, 16}, descriptors.OrderNHD, ""}} {
			t.Run(fmt.Sprintf("%s/tp%d_to_tp%d_%s", shape, tc.p.tp, tc.d.tp, orderName(tc.porder)), func(t *testing.T) {
				c := newNativeVLLMGroupCluster(t, shape, tc.p, tc.d, tc.porder, tc.dorder)
				for i, r := range groupReqs(shape, tc.p.bs, tc.d.bs) {
					c.moveGroups(fmt.Sprintf("req-%d", i), i+1, r)
				}
			})
		}
	}
}
