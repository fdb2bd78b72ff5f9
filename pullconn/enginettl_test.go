package pullconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// A prefill engine the decode rank has had no request with for EngineTTL
// is forgotten when the rank handshakes with another: its agent's metadata
// is unloaded from the decode agent and its handshake dropped, and a later
// request to it handshakes again and reads every byte right (vLLM's
// engine_ttl). With a negative EngineTTL nothing is forgotten.
func TestEngineTTLForgetsIdlePrefillEngines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ttl    time.Duration
		forgot uint64
	}{
		{"ttl-1m", time.Minute, 1},
		{"kept", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := connector.NewManualClock(time.Unix(1000, 0))
			c := newCluster(t, clusterOpts{
				fabric:     []loopback.FabricOption{loopback.WithClock(clk)},
				prefillCfg: withClock(clk),
				decodeCfg:  func(cfg *Config) { cfg.Clock = clk; cfg.EngineTTL = tc.ttl },
			})
			// A second prefill engine on the same fabric.
			pe, err := NewEngine(connector.EngineConfig{EngineID: "prefill-b", Model: "m", Geometry: testGeometry(1, 16), Clock: clk})
			require.NoError(t, err)
			t.Cleanup(func() { pe.Close() })
			pa, err := c.fab.NewAgent("prefill-b-0")
			require.NoError(t, err)
			t.Cleanup(func() { pa.Close() })
			pbuf, err := nixl.AllocBuffer(layoutBytes(1, 16))
			require.NoError(t, err)
			t.Cleanup(func() { pbuf.Free() })
			pb, err := NewProducer(pe, Config{RankConfig: connector.RankConfig{Agent: pa, Layout: newLayout(pbuf, 0, 1, 16), StatsInterval: -1, Clock: clk}})
			require.NoError(t, err)
			t.Cleanup(func() { pb.Close() })

			// Request 1, from engine "prefill".
			c.fill(7, []int{1, 2}, 32)
			require.NoError(t, c.cons[0].Load("r1", c.finish("req-1", []int{1, 2}), []int{5, 6}))
			require.NoError(t, c.result("r1")[0].Err)
			c.verify(7, []int{5, 6}, 0, 32)
			desc := nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{{Addr: c.playouts[0].Regions[0].Base, Len: 1}}}
			require.NoError(t, c.dagents[0].CheckRemoteMD("prefill-0", desc), "loaded by the handshake")

			// Two minutes later, a request from "prefill-b".
			clk.Advance(2 * time.Minute)
			p2, err := pb.RequestFinished("req-2", []int{3})
			require.NoError(t, err)
			require.NoError(t, c.cons[0].Load("r2", p2, []int{9}))
			require.NoError(t, c.result("r2")[0].Err)
			require.Equal(t, tc.forgot, extraCount(t, c.cons[0].Stats(), "forgotten_engines"))
			if tc.forgot == 1 {
				require.Error(t, c.dagents[0].CheckRemoteMD("prefill-0", desc), "the idle engine's metadata is unloaded")
			} else {
				require.NoError(t, c.dagents[0].CheckRemoteMD("prefill-0", desc))
			}

			// Request 3 from "prefill" again: handshakes again if it was
			// forgotten, and reads every byte.
			c.fill(8, []int{10, 11}, 32)
			require.NoError(t, c.cons[0].Load("r3", c.finish("req-3", []int{10, 11}), []int{20, 21}))
			require.NoError(t, c.result("r3")[0].Err)
			c.verify(8, []int{20, 21}, 0, 32)
			require.NoError(t, c.dagents[0].CheckRemoteMD("prefill-0", desc))
		})
	}
}
