package pullconn

import (
	"testing"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/nixl"
	"github.com/stretchr/testify/require"
)

// A prefill engine restarted under the same agent names (a new side channel,
// the same names): decode, still holding the dead agents' metadata, replaces
// it at the new handshake and reads the new instance's bytes.
func TestPrefillRestartedUnderTheSameAgentNames(t *testing.T) {
	c := newCluster(t, clusterOpts{prefill: side{1, 16}, decode: side{1, 16}})
	c.fill(1, []int{0}, 16)
	c.load("d1", c.finish("r1", []int{0}), []int{0})
	require.NoError(t, c.result("d1")[0].Err)
	c.verify(1, []int{0}, 0, 16)
	c.freed(1)

	// The prefill engine dies and a new one starts: new engine, new side
	// channel, a new agent under the old name.
	require.NoError(t, c.prods[0].Close())
	require.NoError(t, c.pe.Close())
	require.NoError(t, c.pagents[0].Close())
	a, err := c.fab.NewAgent("prefill-0")
	require.NoError(t, err)
	c.pagents[0] = a
	c.pe, err = NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "m", Geometry: testGeometry(1, 16)})
	require.NoError(t, err)
	buf, err := nixl.AllocBuffer(layoutBytes(1, 16))
	require.NoError(t, err)
	c.pbufs[0].Free()
	c.pbufs[0], c.playouts[0] = buf, newLayout(buf, 0, 1, 16)
	c.prods[0], err = NewProducer(c.pe, Config{RankConfig: connector.RankConfig{Agent: a, Layout: c.playouts[0], StatsInterval: -1}})
	require.NoError(t, err)

	c.fill(2, []int{3}, 16)
	c.load("d2", c.finish("r2", []int{3}), []int{1})
	require.NoError(t, c.result("d2")[0].Err, "the restarted instance's metadata replaces the dead one's")
	c.verify(2, []int{1}, 0, 16)
}
