package pushconn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// nhdCases are the order pairings of the NHD connector tests: NHD on both
// sides, and NHD on one side with HND on the other (the descriptors
// permute).
var nhdCases = []struct{ pre, dec string }{
	{descriptors.OrderNHD, descriptors.OrderNHD},
	{descriptors.OrderNHD, descriptors.OrderHND},
	{"", descriptors.OrderNHD},
}

// TestNHD pushes one request for every order pairing at TP 1->1, 2->1 and
// 1->2 (and across block sizes), registration before and after the
// finish, checking every byte of every decode rank where its own order
// puts it: token t of head h at (t*KVHeads + h)*HeadBytes in an NHD block,
// (h*BlockSize + t)*HeadBytes in an HND one.
func TestNHD(t *testing.T) {
	for _, oc := range nhdCases {
		for _, pair := range []struct{ preTP, decTP, preBlock, decBlock int }{
			{1, 1, 16, 16}, {2, 1, 16, 16}, {1, 2, 16, 16}, {2, 1, 16, 32},
		} {
			name := fmt.Sprintf("%s-to-%s/tp%d-bs%d-to-tp%d-bs%d", descriptors.OrderOf(oc.pre), descriptors.OrderOf(oc.dec),
				pair.preTP, pair.preBlock, pair.decTP, pair.decBlock)
			t.Run(name, func(t *testing.T) {
				r := newRig(t, rigConfig{preTP: pair.preTP, decTP: pair.decTP, preBlock: pair.preBlock, decBlock: pair.decBlock,
					preOrder: oc.pre, decOrder: oc.dec})
				const tokens = 70
				src := blocksFrom(3, (tokens+pair.preBlock-1)/pair.preBlock)
				dst := blocksFrom(10, (tokens+pair.decBlock-1)/pair.decBlock)
				pushOne(t, r, true, "req-1", "req-1", src, dst, tokens)
				for i, l := range r.decLayout {
					require.Equal(t, oc.dec, l.Order)
					checkRawOrder(t, l, dst, 7, tokens, fmt.Sprintf("decode rank %d", i))
				}
				pushOne(t, r, false, "req-2", "req-2", src, dst, tokens)
				for i, l := range r.decLayout {
					checkRawOrder(t, l, dst, 7, tokens, fmt.Sprintf("decode rank %d", i))
				}
				for i, p := range r.producers {
					s := p.Stats()
					require.Equal(t, uint64(0), s.FailedTransfers, "prefill rank %d", i)
					require.Equal(t, uint64(2*max(1, pair.decTP/pair.preTP)), s.Transfers, "prefill rank %d", i)
				}
			})
		}
	}
}

// checkRawOrder reads decode blocks at offsets computed here from the
// order, independently of the rig's visit, so that a rig that placed both
// sides' bytes the same wrong way could not pass.
func checkRawOrder(t *testing.T, l descriptors.Layout, blocks []int, seed, tokens int, what string) {
	t.Helper()
	for region := range l.NumRegions() {
		for tok := range tokens {
			d := l.BlockDesc(region, blocks[tok/l.BlockSize])
			mem, err := nixl.HostBytes(d.Addr, d.Len)
			require.NoError(t, err)
			in := tok % l.BlockSize
			for h := range l.KVHeads {
				slot := h*l.BlockSize + in
				if l.Order == descriptors.OrderNHD {
					slot = in*l.KVHeads + h
				}
				for b := range l.HeadBytes {
					if want := kvByte(seed, region, l.FirstHead()+h, tok, b); mem[slot*l.HeadBytes+b] != want {
						t.Fatalf("%s region %d token %d head %d byte %d: got %#x, want %#x", what, region, tok, l.FirstHead()+h, b, mem[slot*l.HeadBytes+b], want)
					}
				}
			}
		}
	}
}

// A prefix hit on an NHD decode written by an HND prefill: decode registers
// only the blocks after its cached two, and only those tokens arrive,
// permuted.
func TestNHDPrefixHit(t *testing.T) {
	r := newRig(t, rigConfig{preTP: 2, decTP: 1, decOrder: descriptors.OrderNHD})
	src := blocksFrom(0, 5) // 80 tokens
	for _, l := range r.preLayout {
		fill(t, l, src, 3, 80)
	}
	dst := []int{40, 41, 42}
	for _, l := range r.decLayout {
		zero(t, l, dst)
	}
	require.NoError(t, r.consumers[0].Register("req-1", Coordinates(r.pre), dst))
	for _, p := range r.producers {
		_, err := p.RequestFinished("req-1", src)
		require.NoError(t, err)
	}
	got := await(t, r.consumers[0], 1)
	require.NoError(t, got[0].Err)
	// Tokens 32..79 in the three registered blocks, from token 32 on.
	n := 0
	visit(t, r.decLayout[0], dst, 32, 80, func(p *byte, region, head, token, b int) {
		n++
		if want := kvByte(3, region, head, token, b); *p != want {
			t.Fatalf("region %d head %d token %d byte %d: got %#x, want %#x", region, head, token, b, *p, want)
		}
	})
	require.Equal(t, 48*modelHeads*headBytes*4, n)
	for _, p := range r.producers {
		freedOnce(t, p, "req-1")
	}
}
