package pushconn

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// One decode engine reached under two host spellings is two peer entries
// sharing its agents. Evicting the idle one must not drop the agents'
// metadata that the other still writes with: its WRITE goes out without
// failing and without a second handshake.
func TestEvictingAnAliasKeepsTheOtherEntrysAgents(t *testing.T) {
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.MaxPeers = 2 }})
	p := r.producers[0]
	a := r.consumers[0]
	other := startDecode(t, r, "decode-c", 1, 0)

	// decode@127.0.0.1 serves a1 and goes idle.
	require.NoError(t, a.Register("a1", Coordinates(r.pre), []int{0, 1}))
	admitted(t, p, 1)
	pushTo(t, r, a, func() descriptors.Layout { return r.decLayout[0] }, "a1", blocksFrom(0, 2), []int{0, 1}, 1)

	// The same engine as decode@localhost: a registration waits there.
	port := r.dec.Port()
	msg, err := pushwire.EncodeRegistration(&pushwire.Registration{
		RequestID: "b1", DecodeEngineID: "decode", DecodeHost: "localhost", DecodePort: port,
		DecodeTPSize: 1, LocalBlockIDs: [][]int{{4, 5}}, RemoteEngineID: r.pre.ID(),
		RemoteHost: r.pre.Host(), RemotePort: r.pre.Port(), RemoteTPSize: r.pre.Geometry().TPSize, RemotePPSize: 1,
		DecodeIncarnation: a.incarnation,
	})
	require.NoError(t, err)
	require.NoError(t, r.decAgents[0].GenNotif("prefill-0", msg, nil))
	eventually(t, "alias admitted", func() bool { return extra(t, p.Stats(), "handshakes") == 2 })

	// A third engine evicts the idle 127.0.0.1 entry.
	require.NoError(t, other.consumer.Register("c1", Coordinates(r.pre), []int{0, 1}))
	eventually(t, "c admitted", func() bool { return extra(t, p.Stats(), "handshakes") == 3 })
	require.Equal(t, uint64(1), extra(t, p.Stats(), "evicted_peers"))

	zero(t, r.decLayout[0], []int{4, 5})
	src := blocksFrom(2, 2)
	fill(t, r.preLayout[0], src, 7, 32)
	_, err = p.RequestFinished("b1", src)
	require.NoError(t, err)
	freedOnce(t, p, "b1")
	check(t, r.decLayout[0], []int{4, 5}, 0, 7, 32)
	s := p.Stats()
	require.Equal(t, uint64(3), extra(t, s, "handshakes"), "the alias's agent metadata was dropped with the evicted entry")
	require.Zero(t, s.FailedTransfers)
}
