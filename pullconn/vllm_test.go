package pullconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/vllm"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// Two gonixl engines in vLLM's protocol move a request's KV, every byte
// verified, across TP sizes: the handshake runs over vLLM's ZMQ side
// channel with its metadata and hash, the Params carry none of gonixl's
// keys, nobody asks for a pin, and the completions carry version 12's
// counts (how many each prefill rank gets).
func TestVLLMProtocol(t *testing.T) {
	for _, tc := range []struct {
		name            string
		prefill, decode side
		wantN           string // the count in each completion
	}{
		{"tp1-to-tp1", side{1, 16}, side{1, 16}, ":1"},
		{"tp2-to-tp1", side{2, 16}, side{1, 16}, ":1"},
		{"tp1-to-tp2", side{1, 16}, side{2, 16}, ":2"},
		{"tp2-to-tp2", side{2, 16}, side{2, 16}, ":1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, clusterOpts{vllm: true, prefill: tc.prefill, decode: tc.decode})
			for i, cn := range c.cons {
				assert.Equal(t, tc.wantN, ":"+itoa(cn.rd.completionN(&pairing{payload: &handshake.Payload{TPSize: tc.prefill.tp}})), "decode rank %d", i)
			}
			pblocks := blocksFrom(3, 5)
			dblocks := blocksFrom(10, 5)
			c.fill(7, pblocks, 70)
			p := c.finish("req-1", pblocks)
			assert.InDelta(t, vllm.SideClock()+30, p.RemoteBlocksExpiryTime, 1, "the lease's end on the side channel's clock")
			assert.Nil(t, p.RemoteStagingSlot)
			assert.Zero(t, p.RemoteHoldNonce)
			assert.Zero(t, p.RemoteIncarnation, "gonixl's key, left out in vLLM's protocol")
			c.load("dreq-1", p, dblocks)
			for i, r := range c.result("dreq-1") {
				require.NoError(t, r.Err, "decode rank %d", i)
			}
			c.verify(7, dblocks, 0, 70)
			freed := c.freed(1)
			for i := range c.prods {
				assert.Equal(t, map[string]int{"req-1": 1}, freed[i], "prefill rank %d", i)
			}
			for i, cn := range c.cons {
				v, _ := cn.Stats().Get("confirmations")
				assert.Zero(t, v, "decode rank %d asked for no pin", i)
			}
		})
	}
}

// A rank with staging refuses an engine in vLLM's protocol, which has none;
// so does a push engine, and a geometry of separate K and V regions.
func TestVLLMProtocolRefusals(t *testing.T) {
	g := testGeometry(1, 16)
	v := connector.VLLM{Version: "0.27.1", AttentionBackend: "FLASH_ATTN"}
	_, err := NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: g, Protocol: connector.ProtocolVLLM, VLLM: v})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, "pullconn: invalid argument: EngineConfig.Geometry.KVPacked is false: vLLM's connector moves each layer's K and V packed in one region (set KVPacked, or MLA)")
	g.KVPacked = true
	_, err = NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: g, Protocol: connector.ProtocolVLLM})
	assert.EqualError(t, err, "pullconn: invalid argument: EngineConfig.VLLM.Version is empty: vLLM's compatibility hash needs the peers' vLLM version")
	_, err = NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: g, Protocol: "zmq"})
	assert.EqualError(t, err, `pullconn: invalid argument: EngineConfig.Protocol is "zmq", want "" or "vllm"`)

	e, err := NewEngine(connector.EngineConfig{EngineID: "e", Model: "m", Geometry: g, Protocol: connector.ProtocolVLLM, VLLM: v})
	require.NoError(t, err)
	defer e.Close()
	buf, err := nixl.AllocBuffer(int(g.RankBytes()))
	require.NoError(t, err)
	defer buf.Free()
	l, err := g.Layout(nixl.DRAM, 0, buf.RegDesc().Desc)
	require.NoError(t, err)
	sbuf, err := nixl.AllocBuffer(1 << 16)
	require.NoError(t, err)
	defer sbuf.Free()
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	defer fab.Close()
	a, err := fab.NewAgent("p")
	require.NoError(t, err)
	defer a.Close()
	_, err = NewProducer(e, Config{RankConfig: connector.RankConfig{Agent: a, Layout: l,
		Staging: connector.Staging{Mode: connector.StagingOn, Mem: nixl.DRAM, Base: sbuf.Addr(), SlotBytes: 1 << 15, Slots: 2}}})
	require.ErrorIs(t, err, connector.ErrInvalid)
	assert.EqualError(t, err, `pullconn: invalid argument: RankConfig.Staging.Mode is "on": staging is gonixl's own protocol, and this engine speaks vLLM's`)
}

// In vLLM's protocol the hold's deadline travels on the side channel's
// clock and decode maps it through the handshake's offset: a load that
// comes after prefill's lease ended fails with ErrExpired instead of
// reading blocks prefill may have given to another request.
func TestVLLMProtocolExpiry(t *testing.T) {
	const lease = 300 * time.Millisecond
	c := newCluster(t, clusterOpts{vllm: true,
		prefillCfg: func(rc *Config) { rc.Lease = lease },
		decodeCfg: func(rc *Config) {
			rc.Lease, rc.HeartbeatInterval, rc.ExpiryMargin = lease, lease/6, 20*time.Millisecond
		},
	})
	// The handshake first, so that the late load is judged on the deadline.
	warm := c.finish("warm", []int{1})
	c.load("dwarm", warm, []int{1})
	require.NoError(t, c.result("dwarm")[0].Err)

	p := c.finish("late", []int{2})
	time.Sleep(lease + 100*time.Millisecond)
	c.load("dlate", p, []int{2})
	r := c.result("dlate")[0]
	require.ErrorIs(t, r.Err, ErrExpired)
	assert.Equal(t, uint64(1), c.cons[0].Stats().ExpiredRequests)
}
