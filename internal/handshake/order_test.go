package handshake

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/sidechannel"
)

// withLayout is compat(mode) with the layout name set.
func withLayout(mode, layout string) Compat {
	c := compat(mode)
	c.Layout = layout
	return c
}

func TestLayoutName(t *testing.T) {
	assert.Equal(t, "HND", LayoutName("", nil))
	assert.Equal(t, "HND", LayoutName(descriptors.OrderHND, []string{}))
	assert.Equal(t, "NHD", LayoutName(descriptors.OrderNHD, nil))
	assert.Equal(t, "HND+groups=full,ssm", LayoutName("", []string{"full", "ssm"}))
	assert.Equal(t, "NHD+groups=full,sliding_window", LayoutName(descriptors.OrderNHD, []string{"full", "sliding_window"}))
}

// Two current peers accept each other's block order, and nothing else that
// differs: the groups part and any other layout still refuse.
func TestCheckOrder(t *testing.T) {
	for _, c := range [][2]string{
		{"HND", "NHD"}, {"NHD", "HND"}, {"NHD", "NHD"},
		{"HND+groups=full,ssm", "NHD+groups=full,ssm"}, {"NHD+groups=full,sliding_window", "HND+groups=full,sliding_window"},
	} {
		remote := withLayout(ModePull, c[1])
		assert.NoError(t, Check(withLayout(ModePull, c[0]), remote, remote.Hash()), "%s against %s", c[0], c[1])
	}
	for _, c := range [][2]string{
		{"NHD", "HND+groups=full,ssm"}, {"NHD+groups=full,ssm", "NHD+groups=full,sliding_window"},
		{"NHD", "MLA"}, {"MLA+groups=x", "NHD+groups=x"}, {"NHD", "NHD+"}, {"NHD", "nhd"},
	} {
		remote := withLayout(ModePull, c[1])
		err := Check(withLayout(ModePull, c[0]), remote, remote.Hash())
		require.ErrorIs(t, err, ErrIncompatible)
		assert.EqualError(t, err, fmt.Sprintf("incompatible engines: kv layout mismatch: local %q, remote %q", c[0], c[1]))
	}
	// The hash is checked against the remote's own facts: a wrong one is
	// refused also where the orders differ, naming what this build hashes.
	remote := withLayout(ModePull, "NHD")
	err := Check(compat(ModePull), remote, compat(ModePull).Hash())
	require.ErrorIs(t, err, ErrIncompatible)
	assert.EqualError(t, err, `incompatible engines: compatibility hash mismatch: local "`+remote.Hash()+`", remote "`+compat(ModePull).Hash()+`"`)
}

// olderCheck is Check as a gonixl peer that predates the block order in the
// layout name applies it (the rule at 6b96763): every fact byte for byte,
// and its own hash against the remote's.
func olderCheck(local, remote Compat, remoteHash string) error {
	if local.Version != remote.Version {
		return fmt.Errorf("%w: protocol version mismatch: local %d, remote %d", ErrIncompatible, local.Version, remote.Version)
	}
	for _, f := range []struct{ what, l, r string }{
		{"transfer mode", local.Mode, remote.Mode},
		{"model", local.Model, remote.Model},
		{"kv dtype", local.DType, remote.DType},
		{"kv layout", local.Layout, remote.Layout},
	} {
		if f.l != f.r {
			return fmt.Errorf("%w: %s mismatch: local %q, remote %q", ErrIncompatible, f.what, f.l, f.r)
		}
	}
	if h := local.Hash(); h != remoteHash {
		return fmt.Errorf("%w: compatibility hash mismatch: local %q, remote %q", ErrIncompatible, h, remoteHash)
	}
	return nil
}

// olderHello is the hello frame body a gonixl decode engine that predates
// the block order sends (engine "old-decode", model "m", bfloat16, layout
// "HND", pull), as that build encoded it, its hash included.
const olderHello = "83a9656e67696e655f6964aa6f6c642d6465636f6465a6636f6d70617485a776657273696f6e01a56d6f64656ca16da56474797065a862666c6f61743136a66c61796f7574a3484e44a46d6f6465a470756c6ca468617368d9203166363435663830646232613136653432623731613337653234633939396163"

func olderCompat() Compat {
	return Compat{Version: 1, Model: "m", DType: "bfloat16", Layout: "HND", Mode: ModePull}
}

// orderEngine is a one-rank engine of model "m" whose rank has the order.
func orderEngine(t *testing.T, order string) *Server {
	t.Helper()
	c := olderCompat()
	c.Layout = LayoutName(order, nil)
	s := serve(t, Engine{EngineID: "prefill-e", Compat: c, TPSize: 1, PPSize: 1, BlockSize: 16}, ServerOptions{})
	r := rank(0, 1, 16)
	r.Layout.Order = order
	require.NoError(t, s.SetRank(r))
	return s
}

// An HND engine pairs with an older HND-only peer exactly as before: the
// older peer's hello is accepted, its own check passes on the reply, and a
// current HND hello is byte for byte the older one. An NHD engine answers
// the same hello (it cannot tell an older HND peer from a current one),
// and the older peer refuses the reply: it reads the name as another
// layout, not an NHD rank's blocks as HND ones.
func TestOlderPeerHello(t *testing.T) {
	body, err := hex.DecodeString(olderHello)
	require.NoError(t, err)
	var h Hello
	require.NoError(t, sidechannel.Decode(body, &h))
	require.Equal(t, Hello{EngineID: "old-decode", Compat: olderCompat(), Hash: "1f645f80db2a16e42b71a37e24c999ac"}, h)
	cur, err := msgpack.Marshal(Hello{EngineID: "old-decode", Compat: Compat{Version: Version, Model: "m", DType: "bfloat16",
		Layout: LayoutName("", nil), Mode: ModePull}, Hash: h.Hash})
	require.NoError(t, err)
	assert.Equal(t, olderHello, hex.EncodeToString(cur), "a current HND hello is the older one")

	for _, c := range []struct {
		order, refusal string
	}{
		{"", ""},
		{descriptors.OrderHND, ""},
		{descriptors.OrderNHD, `incompatible engines: kv layout mismatch: local "HND", remote "NHD"`},
	} {
		s := orderEngine(t, c.order)
		r := s.answer(h)
		require.Empty(t, r.Error, "order %q", c.order)
		require.NotNil(t, r.Payload)
		// The reply as the older peer reads it: its bytes, then its check.
		b, err := msgpack.Marshal(r)
		require.NoError(t, err)
		var got Reply
		require.NoError(t, msgpack.Unmarshal(b, &got))
		err = olderCheck(olderCompat(), got.Compat, got.Hash)
		if c.refusal == "" {
			require.NoError(t, err, "order %q", c.order)
			assert.Equal(t, descriptors.OrderOf(c.order), descriptors.OrderOf(got.Payload.Ranks[0].Layout.Order))
			continue
		}
		require.ErrorIs(t, err, ErrIncompatible)
		assert.EqualError(t, err, c.refusal)
	}
}

// olderServer serves an HND engine the way an older gonixl build answers:
// its check is olderCheck, and its rank's layout has no order.
func olderServer(t *testing.T) string {
	t.Helper()
	c := olderCompat()
	p := &Payload{EngineID: "old-prefill", Compat: c, Hash: c.Hash(), TPSize: 1, PPSize: 1, BlockSize: 16, Ranks: RankList{rank(0, 1, 16)}}
	srv, err := sidechannel.Listen("127.0.0.1:0", func(h Hello) Reply {
		r := Reply{Compat: c, Hash: c.Hash(), Now: time.Now().UnixNano()}
		if err := olderCheck(c, h.Compat, h.Hash); err != nil {
			r.Error = fmt.Sprintf("engine %q refused engine %q: %v", "old-prefill", h.EngineID, err)
			return r
		}
		r.Payload = p
		return r
	}, sidechannel.ServerOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv.Addr().String()
}

// The other way round: a current HND client pairs with an older server,
// and a current NHD client is refused by it, with the older side's words.
func TestOlderPeerServer(t *testing.T) {
	addr := olderServer(t)
	hnd, err := NewClient("decode-e", olderCompat(), 2*time.Second, 0)
	require.NoError(t, err)
	defer hnd.Close()
	p, err := hnd.Get(context.Background(), "old-prefill", addr)
	require.NoError(t, err)
	assert.Equal(t, "", p.Ranks[0].Layout.Order)

	c := olderCompat()
	c.Layout = LayoutName(descriptors.OrderNHD, nil)
	nhd, err := NewClient("decode-e", c, 2*time.Second, 0)
	require.NoError(t, err)
	defer nhd.Close()
	_, err = nhd.Get(context.Background(), "old-prefill", addr)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.EqualError(t, err, `incompatible engines: engine "old-prefill" at `+addr+` refused: engine "old-prefill" refused engine "decode-e": incompatible engines: kv layout mismatch: local "HND", remote "NHD"`)
}

// Two current engines of different orders pair over the side channel, each
// seeing the other rank's order in the payload.
func TestCurrentPeersDifferentOrders(t *testing.T) {
	s := orderEngine(t, descriptors.OrderNHD)
	c := olderCompat()
	cl, err := NewClient("decode-e", c, 2*time.Second, 0)
	require.NoError(t, err)
	defer cl.Close()
	p, err := cl.Get(context.Background(), "prefill-e", s.Addr().String())
	require.NoError(t, err)
	assert.Equal(t, descriptors.OrderNHD, p.Ranks[0].Layout.Order)
	assert.Equal(t, "NHD", p.Compat.Layout)
}

// FuzzSameLayout: the layout comparison reads names off the network; it
// never panics, is symmetric and reflexive, and accepts differing names
// only when both heads are orders and the rest is equal.
func FuzzSameLayout(f *testing.F) {
	for _, s := range []string{"HND", "NHD", "HND+groups=full,ssm", "NHD+groups=full,ssm", "", "+", "MLA", "NHD+"} {
		f.Add(s, "HND")
	}
	f.Fuzz(func(t *testing.T, l, r string) {
		got := sameLayout(l, r)
		if got != sameLayout(r, l) {
			t.Fatalf("not symmetric: %q %q", l, r)
		}
		if !sameLayout(l, l) {
			t.Fatalf("not reflexive: %q", l)
		}
		if got && l != r {
			lh, lt := splitHead(l)
			rh, rt := splitHead(r)
			if !orderHead(lh) || !orderHead(rh) || lt != rt {
				t.Fatalf("accepted %q against %q", l, r)
			}
		}
	})
}
