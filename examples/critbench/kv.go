package critbench

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// newLayout describes one rank's KV cache in buf: 2*numLayers regions of
// blocks blocks each.
func newLayout(buf *nixl.Buffer, tp, rank, blockTokens, blocks int) descriptors.Layout {
	l := descriptors.Layout{
		Mem: nixl.DRAM, NumLayers: numLayers, NumBlocks: blocks, BlockSize: blockTokens,
		KVHeads: modelHeads / tp, HeadBytes: headBytes, DType: "bfloat16", TPRank: rank, TPSize: tp,
	}
	for i := range l.NumRegions() {
		l.Regions = append(l.Regions, descriptors.Region{Base: buf.Addr() + uint64(i)*l.RegionLen()})
	}
	return l
}

// geometry is newLayout's geometry.
func geometry(tp, blockTokens, blocks int) descriptors.Geometry {
	return descriptors.Geometry{Layers: numLayers, KVHeads: modelHeads, HeadDim: headBytes / 2, DType: "bfloat16",
		BlockSize: blockTokens, Blocks: blocks, TPSize: tp}
}

func layoutBytes(tp, blockTokens, blocks int) int {
	return 2 * numLayers * blocks * blockTokens * (modelHeads / tp) * headBytes
}

// kvByte is the content of the KV cache: a function of the request, the
// region, the model head, the token and the byte, so that bytes copied to
// the wrong place are caught.
func kvByte(seed, region, head, token, b int) byte {
	x := uint32(seed)*2654435761 ^ uint32(region)*40503 ^ uint32(head)*97 ^ uint32(token)*131 ^ uint32(b)*7
	x ^= x >> 13
	x *= 0x5bd1e995
	return byte(x ^ x>>15)
}

// visit calls f on every byte of blocks on layout l, with the region,
// model head, token and byte it holds.
func visit(l *descriptors.Layout, blocks []int, f func(p *byte, region, head, token, b int)) error {
	for region := range l.NumRegions() {
		for i, blk := range blocks {
			d := l.BlockDesc(region, blk)
			mem, err := nixl.HostBytes(d.Addr, d.Len)
			if err != nil {
				return err
			}
			for hh := range l.KVHeads {
				for tok := range l.BlockSize {
					row := mem[(hh*l.BlockSize+tok)*l.HeadBytes:][:l.HeadBytes]
					for b := range row {
						f(&row[b], region, l.FirstHead()+hh, i*l.BlockSize+tok, b)
					}
				}
			}
		}
	}
	return nil
}

func fill(l *descriptors.Layout, blocks []int, seed int) error {
	return visit(l, blocks, func(p *byte, region, head, token, b int) { *p = kvByte(seed, region, head, token, b) })
}

// verify checks decode blocks against request seed's content and returns
// the bytes checked.
func verify(l *descriptors.Layout, blocks []int, seed int) (uint64, error) {
	var n uint64
	var bad error
	err := visit(l, blocks, func(p *byte, region, head, token, b int) {
		n++
		if want := kvByte(seed, region, head, token, b); *p != want && bad == nil {
			bad = fmt.Errorf("request %d region %d head %d token %d byte %d: got %#x, want %#x", seed, region, head, token, b, *p, want)
		}
	})
	if err != nil {
		return n, err
	}
	return n, bad
}
