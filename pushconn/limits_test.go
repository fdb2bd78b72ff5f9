package pushconn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
)

// pushTo finishes request id on prefill rank 0 with fresh content and
// checks that decode rank c ends it successfully with the bytes in dst of
// its layout l.
func pushTo(t *testing.T, r *rig, c *Consumer, l layoutOf, id string, src, dst []int, seed int) {
	t.Helper()
	fill(t, r.preLayout[0], src, seed, 32)
	_, err := r.producers[0].RequestFinished(id, src)
	require.NoError(t, err)
	res := await(t, c, 1)
	require.Equal(t, id, res[0].RequestID)
	require.NoError(t, res[0].Err)
	check(t, l(), dst, 0, seed, 32)
	freedOnce(t, r.producers[0], id)
}

type layoutOf = func() descriptors.Layout

func TestMaxPeersEvictsAnIdleEngineAndRefusesWhenNoneIsIdle(t *testing.T) {
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.MaxPeers = 2 }})
	p := r.producers[0]
	a := r.consumers[0]
	aLayout := func() descriptors.Layout { return r.decLayout[0] }
	b := startDecode(t, r, "decode-b", 1, 0)
	c := startDecode(t, r, "decode-c", 1, 0)
	for _, l := range []descriptors.Layout{r.decLayout[0], b.layout, c.layout} {
		zero(t, l, blocksFrom(0, 16))
	}

	require.NoError(t, a.Register("a1", Coordinates(r.pre), []int{0, 1}))
	admitted(t, p, 1)
	require.NoError(t, b.consumer.Register("b1", Coordinates(r.pre), []int{0, 1}))
	eventually(t, "b admitted", func() bool { return extra(t, p.Stats(), "handshakes") == 2 })

	// Two engines, both with a registration waiting: the third is refused.
	// Prefill never loaded its agent, so the PUSH_FAIL cannot be sent.
	require.NoError(t, c.consumer.Register("c1", Coordinates(r.pre), []int{0, 1}))
	eventually(t, "c refused", func() bool {
		s := p.Stats()
		return extra(t, s, "peer_limit_refusals") == 1 && extra(t, s, "push_fail_undeliverable") == 1
	})
	s := p.Stats()
	require.Equal(t, uint64(2), extra(t, s, "handshakes"), "no handshake with a refused engine")
	require.Zero(t, extra(t, s, "evicted_peers"))

	// a1 is written: engine a has nothing left and is the one evicted for c.
	pushTo(t, r, a, aLayout, "a1", blocksFrom(0, 2), []int{0, 1}, 1)
	require.NoError(t, c.consumer.Register("c2", Coordinates(r.pre), []int{2, 3}))
	eventually(t, "c admitted", func() bool { return extra(t, p.Stats(), "handshakes") == 3 })
	require.Equal(t, uint64(1), extra(t, p.Stats(), "evicted_peers"))
	pushTo(t, r, c.consumer, func() descriptors.Layout { return c.layout }, "c2", blocksFrom(2, 2), []int{2, 3}, 2)

	// a comes back: c is idle now, b still waits for b1, so c goes; a
	// handshakes again (its agent's metadata was dropped) and is written.
	require.NoError(t, a.Register("a2", Coordinates(r.pre), []int{4, 5}))
	eventually(t, "a admitted again", func() bool { return extra(t, p.Stats(), "handshakes") == 4 })
	require.Equal(t, uint64(2), extra(t, p.Stats(), "evicted_peers"))
	pushTo(t, r, a, aLayout, "a2", blocksFrom(4, 2), []int{4, 5}, 3)

	// b's registration survived every eviction.
	pushTo(t, r, b.consumer, func() descriptors.Layout { return b.layout }, "b1", blocksFrom(6, 2), []int{0, 1}, 4)
	s = p.Stats()
	require.Equal(t, uint64(1), extra(t, s, "peer_limit_refusals"))
	require.Equal(t, uint64(2), extra(t, s, "evicted_peers"))
	require.Equal(t, uint64(4), s.Transfers)
	require.Equal(t, 1, c.consumer.Pending(), "c1 was refused without a PUSH_FAIL it could receive: it waits for decode's timeout")
}

func TestMaxPendingRegistrationsRefusesWithPushFailOverloaded(t *testing.T) {
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.MaxPendingRegistrations = 2 }})
	c, p := r.consumers[0], r.producers[0]
	aLayout := func() descriptors.Layout { return r.decLayout[0] }
	zero(t, r.decLayout[0], blocksFrom(0, 16))
	require.NoError(t, c.Register("r1", Coordinates(r.pre), []int{0, 1}))
	require.NoError(t, c.Register("r2", Coordinates(r.pre), []int{2, 3}))
	admitted(t, p, 2)
	require.NoError(t, c.Register("r3", Coordinates(r.pre), []int{4, 5}))
	res := await(t, c, 1)
	require.Equal(t, "r3", res[0].RequestID)
	require.True(t, isPushFail(res[0].Err, "overloaded"), "got %v", res[0].Err)
	require.ErrorContains(t, res[0].Err, "prefill rank holds 2 registrations, its limit (Config.MaxPendingRegistrations)")
	eventually(t, "PUSH_FAIL counted", func() bool { return extra(t, p.Stats(), "push_fail_sent") == 1 })
	s := p.Stats()
	require.Equal(t, uint64(1), extra(t, s, "pending_limit_refusals"))
	require.Equal(t, uint64(3), extra(t, s, "registrations_received"))

	// r1 is written: room for one more.
	pushTo(t, r, c, aLayout, "r1", blocksFrom(0, 2), []int{0, 1}, 1)
	require.NoError(t, c.Register("r4", Coordinates(r.pre), []int{6, 7}))
	eventually(t, "r4 received", func() bool { return extra(t, p.Stats(), "registrations_received") == 4 })
	pushTo(t, r, c, aLayout, "r4", blocksFrom(6, 2), []int{6, 7}, 4)
	pushTo(t, r, c, aLayout, "r2", blocksFrom(2, 2), []int{2, 3}, 2)
	require.Equal(t, uint64(1), extra(t, p.Stats(), "pending_limit_refusals"))
	require.Equal(t, uint64(3), p.Stats().Transfers)
}

// A registration waiting for its decode engine's handshake counts too.
func TestParkedRegistrationsCountTowardsMaxPendingRegistrations(t *testing.T) {
	r := newRig(t, rigConfig{preRank: func(c *Config) { c.MaxPendingRegistrations = 1 }})
	p := r.producers[0]
	// A TP 2 decode engine whose rank 1 never starts: prefill's handshake
	// with it keeps being told to retry, so its registration stays parked.
	half := startDecode(t, r, "decode-half", 2, 0)
	require.NoError(t, half.consumer.Register("x1", Coordinates(r.pre), []int{0}))
	eventually(t, "x1 received", func() bool { return extra(t, p.Stats(), "registrations_received") == 1 })
	require.NoError(t, r.consumers[0].Register("r1", Coordinates(r.pre), []int{0}))
	eventually(t, "r1 refused", func() bool { return extra(t, p.Stats(), "pending_limit_refusals") == 1 })
	s := p.Stats()
	require.Equal(t, uint64(2), extra(t, s, "registrations_received"))
	require.Zero(t, extra(t, s, "handshakes"))
	require.Zero(t, extra(t, s, "peer_limit_refusals"))
}

func TestLimitsMustNotBeNegative(t *testing.T) {
	r := newRig(t, rigConfig{noProducers: true})
	for i, tc := range []struct {
		want string
		edit func(*Config)
	}{
		{"Config.MaxPeers is -1, want > 0", func(c *Config) { c.MaxPeers = -1 }},
		{"Config.MaxPendingRegistrations is -1, want > 0", func(c *Config) { c.MaxPendingRegistrations = -1 }},
	} {
		field, edit := tc.want, tc.edit
		a, err := r.fabric.NewAgent(fmt.Sprintf("prefill-%d", i))
		require.NoError(t, err)
		l := testLayout(t, 1, 0, 16, numBlocks)
		cfg := Config{RankConfig: connector.RankConfig{Agent: a, Layout: l}}
		edit(&cfg)
		p, err := NewProducer(r.pre, cfg)
		freeLayout(l)
		require.Nil(t, p)
		require.ErrorIs(t, err, connector.ErrInvalid)
		require.ErrorContains(t, err, field)
	}
}
