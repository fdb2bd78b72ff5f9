package pullconn

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
)

// restartPrefill kills the cluster's prefill engine (ranks, agents, memory)
// and starts a new one as a restarted process would: the same engine id,
// side-channel address and agent names, new agents and memory. o must be
// the options the cluster was made with.
func (c *cluster) restartPrefill(o clusterOpts) {
	c.t.Helper()
	o.defaults()
	addr := net.JoinHostPort(c.pe.Host(), strconv.Itoa(c.pe.Port()))
	for _, p := range c.prods {
		require.NoError(c.t, p.Close())
	}
	require.NoError(c.t, c.pe.Close())
	for _, a := range c.pagents {
		require.NoError(c.t, a.Close())
	}
	for _, b := range c.pbufs {
		b.Free()
	}
	c.prods, c.pagents, c.pbufs, c.playouts = nil, nil, nil, nil

	pg := testGeometry(o.prefill.tp, o.prefill.bs)
	pg.KVPacked = o.vllm
	pcfg := connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: pg, ListenAddr: addr}
	if o.vllm {
		v := connector.VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}
		pcfg.Protocol, pcfg.VLLM = connector.ProtocolVLLM, v
	}
	var err error
	c.pe, err = NewEngine(pcfg)
	require.NoError(c.t, err)
	require.Equal(c.t, addr, net.JoinHostPort(c.pe.Host(), strconv.Itoa(c.pe.Port())), "the restarted engine listens where the old one did")
	for r := 0; r < o.prefill.tp; r++ {
		a, err := c.fab.NewAgent(fmt.Sprintf("prefill-%d", r))
		require.NoError(c.t, err)
		buf, err := nixl.AllocBuffer(layoutBytes(o.prefill.tp, o.prefill.bs))
		require.NoError(c.t, err)
		l := newLayout(buf, r, o.prefill.tp, o.prefill.bs)
		if o.vllm {
			l, err = pg.Layout(nixl.DRAM, r, buf.RegDesc().Desc)
			require.NoError(c.t, err)
		}
		p, err := NewProducer(c.pe, Config{RankConfig: connector.RankConfig{Agent: a, Layout: l, StatsInterval: -1}})
		require.NoError(c.t, err)
		c.pagents, c.pbufs, c.playouts, c.prods = append(c.pagents, a), append(c.pbufs, buf), append(c.playouts, l), append(c.prods, p)
	}
}

// requireRestartFailure checks that every decode rank failed load id with
// errPrefillGone, naming the restart, and never reported it done.
func requireRestartFailure(t *testing.T, rs []connector.Result) {
	t.Helper()
	for i, r := range rs {
		require.Error(t, r.Err, "decode rank %d", i)
		require.ErrorIs(t, r.Err, errPrefillGone, "decode rank %d", i)
		require.Contains(t, r.Err.Error(), "restarted", "decode rank %d", i)
	}
}

// Issue 35: the prefill engine restarts at the same address (same engine id
// and side channel, new agents under the same names). The first request the
// new engine prefilled loads at decode first time, with every byte right,
// and without a failed READ on the dead agent: its Params name the new
// incarnation, which decode's cached handshake does not, so decode
// handshakes again before it reads. A request the old engine prefilled
// fails with errPrefillGone, never done.
func TestFirstRequestAfterPrefillRestartAtSameAddressLoads(t *testing.T) {
	for _, tc := range []struct{ prefill, decode side }{{side{1, 16}, side{1, 16}}, {side{2, 16}, side{1, 16}}, {side{1, 16}, side{2, 16}}} {
		t.Run(fmt.Sprintf("prefill_tp%d_decode_tp%d", tc.prefill.tp, tc.decode.tp), func(t *testing.T) {
			o := clusterOpts{prefill: tc.prefill, decode: tc.decode}
			c := newCluster(t, o)
			c.fill(1, []int{0}, 16)
			c.load("d1", c.finish("r1", []int{0}), []int{0})
			for _, r := range c.result("d1") {
				require.NoError(t, r.Err)
			}
			c.verify(1, []int{0}, 0, 16)
			c.freed(1)
			c.fill(5, []int{5}, 16)
			stale := c.finish("r5", []int{5}) // held by the old engine, never loaded before it dies

			c.restartPrefill(o)
			// The new engine holds other bytes in the same blocks, even
			// under the same request id: a READ of them for the old Params
			// would be wrong bytes.
			c.fill(2, []int{5}, 16)
			c.load("d2", c.finish("r5", []int{5}), []int{1})
			for i, r := range c.result("d2") {
				require.NoError(t, r.Err, "decode rank %d: the first request of the restarted engine", i)
			}
			c.verify(2, []int{1}, 0, 16)
			for i, cn := range c.cons {
				require.Equal(t, uint64(0), cn.Stats().FailedTransfers, "decode rank %d: no READ went to the dead agent", i)
			}
			c.freed(1)

			// The old engine's Params: decode handshakes again once, sees
			// the engine still publishes the new incarnation and fails the
			// load before any READ.
			c.load("d5", stale, []int{2})
			requireRestartFailure(t, c.result("d5"))
			for i, cn := range c.cons {
				require.Equal(t, uint64(0), cn.Stats().FailedTransfers, "decode rank %d", i)
			}
		})
	}
}

// A request the old engine prefilled, loaded after the restart while decode
// still has the old handshake: its READ to the dead agent fails, decode
// handshakes again, finds another incarnation that the Params do not name,
// and fails the load with errPrefillGone (no second READ). A new request
// then loads first time.
func TestOldIncarnationRequestAfterPrefillRestartFails(t *testing.T) {
	o := clusterOpts{}
	c := newCluster(t, o)
	c.fill(1, []int{0}, 16)
	c.load("d1", c.finish("r1", []int{0}), []int{0})
	require.NoError(t, c.result("d1")[0].Err)
	c.freed(1)
	c.fill(5, []int{5}, 16)
	stale := c.finish("r5", []int{5})

	c.restartPrefill(o)
	c.fill(2, []int{5}, 16)
	fresh := c.finish("r5", []int{5}) // the same id and blocks, other bytes

	c.load("d5", stale, []int{2})
	requireRestartFailure(t, c.result("d5"))
	require.Equal(t, uint64(1), c.cons[0].Stats().FailedTransfers, "one READ, to the dead agent; none to the new one")

	c.load("d2", fresh, []int{1})
	require.NoError(t, c.result("d2")[0].Err)
	c.verify(2, []int{1}, 0, 16)
}

// The same, with Params that name no incarnation (a gonixl prefill from
// before the key): the READ to the dead agent fails, decode handshakes
// again and, the engine publishing another incarnation, retries the load
// once on it. The new engine holds the same id on the same blocks with
// other bytes; its pin is refused (the hold's nonce differs), so the load
// fails with ErrNotHeld: a retry never gives a done result on wrong bytes.
// A request of the new engine with no incarnation key loads on the retry.
func TestRetryAfterPrefillRestartIsRefusedForOldHold(t *testing.T) {
	o := clusterOpts{}
	c := newCluster(t, o)
	c.fill(1, []int{0}, 16)
	c.load("d1", c.finish("r1", []int{0}), []int{0})
	require.NoError(t, c.result("d1")[0].Err)
	c.freed(1)
	c.fill(5, []int{5}, 16)
	stale := c.finish("r5", []int{5})
	stale.RemoteIncarnation = 0

	c.restartPrefill(o)
	c.fill(2, []int{5}, 16)
	fresh := c.finish("r5", []int{5})
	fresh.RemoteIncarnation = 0

	c.load("d5", stale, []int{2})
	err := c.result("d5")[0].Err
	require.ErrorIs(t, err, ErrNotHeld, "the retry's pin must be refused: the new engine's hold of r5 is another hold")
	require.Equal(t, uint64(1), c.cons[0].Stats().FailedTransfers)

	// The old handshake is forgotten: a new request of the new engine
	// loads first time.
	c.load("d2", fresh, []int{1})
	require.NoError(t, c.result("d2")[0].Err)
	c.verify(2, []int{1}, 0, 16)

	// And the retry itself: a fresh request whose first READ goes to the
	// dead agent (decode kept the old handshake) loads on the retry.
	c.restartPrefill(o)
	c.fill(3, []int{6}, 16)
	p := c.finish("r6", []int{6})
	p.RemoteIncarnation = 0
	c.load("d6", p, []int{3})
	require.NoError(t, c.result("d6")[0].Err, "retried once on the new incarnation")
	c.verify(3, []int{3}, 0, 16)
	require.Equal(t, uint64(2), c.cons[0].Stats().FailedTransfers)
}

// In vLLM's protocol nothing tells decode which incarnation prefilled a
// request and no pin protects a retry: the first request after the restart
// fails with errPrefillGone, naming the restart (as vLLM's decode fails
// it); the next handshakes again and loads.
func TestVLLMFirstRequestAfterPrefillRestartFails(t *testing.T) {
	o := clusterOpts{vllm: true}
	c := newCluster(t, o)
	c.fill(1, []int{0}, 16)
	c.load("d1", c.finish("r1", []int{0}), []int{0})
	require.NoError(t, c.result("d1")[0].Err)
	c.verify(1, []int{0}, 0, 16)
	c.freed(1)

	c.restartPrefill(o)
	c.fill(2, []int{1}, 16)
	c.load("d2", c.finish("r2", []int{1}), []int{1})
	rs := c.result("d2")
	requireRestartFailure(t, rs)
	require.True(t, errors.Is(rs[0].Err, ErrTransfer), "still a failed READ: %v", rs[0].Err)

	c.fill(3, []int{2}, 16)
	c.load("d3", c.finish("r3", []int{2}), []int{2})
	require.NoError(t, c.result("d3")[0].Err)
	c.verify(3, []int{2}, 0, 16)
}
