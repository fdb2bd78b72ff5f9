package pullconn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
)

// nhdCases are the order pairings of the NHD connector tests: NHD on both
// sides, and NHD on one side with HND on the other (the descriptors
// permute).
var nhdCases = []struct{ prefill, decode string }{
	{descriptors.OrderNHD, descriptors.OrderNHD},
	{descriptors.OrderNHD, descriptors.OrderHND},
	{"", descriptors.OrderNHD},
}

// TestNHD moves one request through the pull connector for every order
// pairing at TP 1->1, 2->1 and 1->2 (and across block sizes), checking every
// byte of every decode rank where its own order puts it: token t of head h
// at (t*KVHeads + h)*HeadBytes in an NHD block, (h*BlockSize + t)*HeadBytes
// in an HND one.
func TestNHD(t *testing.T) {
	for _, oc := range nhdCases {
		for _, pair := range []struct{ p, d side }{
			{side{1, 16}, side{1, 16}}, {side{2, 16}, side{1, 16}}, {side{1, 16}, side{2, 16}}, {side{2, 16}, side{1, 32}},
		} {
			name := fmt.Sprintf("%s-to-%s/tp%d-bs%d-to-tp%d-bs%d", descriptors.OrderOf(oc.prefill), descriptors.OrderOf(oc.decode),
				pair.p.tp, pair.p.bs, pair.d.tp, pair.d.bs)
			t.Run(name, func(t *testing.T) {
				c := transferCase(t, clusterOpts{prefill: pair.p, decode: pair.d, prefillOrder: oc.prefill, decodeOrder: oc.decode}, 70)
				for i, l := range c.dlayouts {
					require.Equal(t, oc.decode, l.Order)
					checkRawOrder(t, c, i, 7, blocksFrom(10, (70+pair.d.bs-1)/pair.d.bs))
				}
				for i, cn := range c.cons {
					s := cn.Stats()
					assert.Equal(t, uint64(0), s.FailedTransfers, "decode rank %d", i)
					// Whole prefill blocks move, each byte once: 5 blocks of
					// 16 tokens x this rank's heads x 8 bytes x 4 regions.
					assert.Equal(t, uint64(80*c.dlayouts[i].KVHeads*testHeadBytes*4), s.Bytes, "decode rank %d", i)
				}
			})
		}
	}
}

// checkRawOrder reads decode rank r's blocks at offsets computed here from
// the order, independently of the harness's tokenBytes, so that a harness
// that placed both sides' bytes the same wrong way could not pass.
func checkRawOrder(t *testing.T, c *cluster, r, seed int, blocks []int) {
	t.Helper()
	l := c.dlayouts[r]
	mem := c.dbufs[r].Bytes()
	for g := range l.NumRegions() {
		for tok := range 70 {
			blk, in := blocks[tok/l.BlockSize], tok%l.BlockSize
			for h := range l.KVHeads {
				slot := h*l.BlockSize + in
				if l.Order == descriptors.OrderNHD {
					slot = in*l.KVHeads + h
				}
				off := g*int(l.RegionLen()) + blk*int(l.BlockLen()) + slot*l.HeadBytes
				for i := range l.HeadBytes {
					if want := value(seed, g, l.FirstHead()+h, tok, i); mem[off+i] != want {
						t.Fatalf("decode rank %d region %d token %d head %d byte %d at offset %d: got %#x, want %#x",
							r, g, tok, l.FirstHead()+h, i, off+i, mem[off+i], want)
					}
				}
			}
		}
	}
}

// A partial prefix hit on an NHD decode fed by an HND prefill: only the
// tokens after the hit move, permuted.
func TestNHDPrefixHit(t *testing.T) {
	c := newCluster(t, clusterOpts{prefill: side{2, 16}, decode: side{1, 16}, decodeOrder: descriptors.OrderNHD})
	pblocks := blocksFrom(0, 5) // 80 tokens
	c.fill(3, pblocks, 80)
	p := c.finish("req-1", pblocks)
	dblocks := []int{40, 41, 42} // decode holds tokens 0..31
	c.load("dreq-1", p, dblocks)
	require.NoError(t, c.result("dreq-1")[0].Err)
	c.verify(3, dblocks, 32, 80)
	assert.Equal(t, uint64(48*4*8*4), c.cons[0].Stats().Bytes)
	c.freed(1)
}
