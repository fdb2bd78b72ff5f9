package vllmpeer

import (
	"fmt"

	"github.com/gonixl/gonixl/nixl"
)

// Model is the KV cache geometry a peer engine holds, as vLLM's config
// states it.
type Model struct {
	Name      string // model_config.model, part of the hash
	DType     string // torch dtype without "torch.", e.g. "bfloat16"
	ElemBytes int    // bytes of one element (2 for bfloat16)
	Layers    int
	KVHeads   int // the model's, over all TP ranks
	HeadDim   int
	BlockSize int // tokens per block
	NumBlocks int // blocks in every region of every rank
}

func (m Model) validate(tp int) error {
	switch {
	case m.Name == "":
		return fmt.Errorf("vllmpeer: Model.Name is empty")
	case m.DType == "":
		return fmt.Errorf("vllmpeer: Model.DType is empty")
	case m.ElemBytes < 1:
		return fmt.Errorf("vllmpeer: Model.ElemBytes is %d, want >= 1", m.ElemBytes)
	case m.Layers < 1 || m.KVHeads < 1 || m.HeadDim < 1 || m.BlockSize < 1 || m.NumBlocks < 1:
		return fmt.Errorf("vllmpeer: Model %+v: Layers, KVHeads, HeadDim, BlockSize and NumBlocks must be >= 1", m)
	case tp < 1 || tp > m.KVHeads || m.KVHeads%tp != 0:
		return fmt.Errorf("vllmpeer: TPSize is %d, want a divisor of the model's %d KV heads (replicated heads are not played)", tp, m.KVHeads)
	}
	return nil
}

// rowBytes is one head's one token in a region: K's HeadDim elements, then
// V's (vLLM version 12 packs them in one region per layer).
func (m Model) rowBytes() int { return 2 * m.HeadDim * m.ElemBytes }

// kvView is one TP rank's KV memory as vLLM version 12 lays it out: Layers
// regions back to back, each of NumBlocks blocks of blockLen bytes; inside
// a block, head h's BlockSize rows, then head h+1's (HND), each row K's
// HeadDim elements then V's.
type kvView struct {
	m        Model
	tpRank   int
	heads    int // heads this rank holds
	blockLen int
	mem      []byte
}

func newView(m Model, tp, rank int, mem []byte) (kvView, error) {
	if err := m.validate(tp); err != nil {
		return kvView{}, err
	}
	if rank < 0 || rank >= tp {
		return kvView{}, fmt.Errorf("vllmpeer: TP rank %d is outside [0, %d)", rank, tp)
	}
	heads := m.KVHeads / tp
	v := kvView{m: m, tpRank: rank, heads: heads, blockLen: m.BlockSize * heads * m.rowBytes()}
	if mem != nil && len(mem) < v.regionLen()*m.Layers {
		return kvView{}, fmt.Errorf("vllmpeer: KV memory of rank %d is %d bytes, want %d", rank, len(mem), v.regionLen()*m.Layers)
	}
	v.mem = mem
	return v, nil
}

// RankBytes returns the bytes of one rank's KV memory for TP size tp.
func (m Model) RankBytes(tp int) int {
	return m.Layers * m.NumBlocks * m.BlockSize * (m.KVHeads / tp) * m.rowBytes()
}

// FillKV writes a prompt's KV (docs/kvfill.md) into blocks of mem, one
// rank's KV memory laid out as vLLM's (and gonixl's KVPacked layout).
func FillKV(mem []byte, m Model, tp, rank int, tokens, blocks []int) error {
	v, err := newView(m, tp, rank, mem)
	if err != nil {
		return err
	}
	if err := v.checkBlocks(blocks); err != nil {
		return err
	}
	v.fill(blocks, PrefixHashes(tokens))
	return nil
}

// CheckKV compares blocks of mem with a prompt's KV, as FillKV writes it.
func CheckKV(mem []byte, m Model, tp, rank int, tokens, blocks []int) (Check, error) {
	return CheckKVFrom(mem, m, tp, rank, tokens, blocks, 0)
}

// CheckKVFrom is CheckKV for blocks holding the request's blocks from its
// block first on: what a decode with the first ones cached received.
func CheckKVFrom(mem []byte, m Model, tp, rank int, tokens, blocks []int, first int) (Check, error) {
	v, err := newView(m, tp, rank, mem)
	if err != nil {
		return Check{}, err
	}
	if err := v.checkBlocks(blocks); err != nil {
		return Check{}, err
	}
	return v.checkFrom(blocks, first, PrefixHashes(tokens)), nil
}

// rankKV is a rank's view over a buffer the peer allocated.
type rankKV struct {
	kvView
	buf *nixl.Buffer
}

func newRankKV(m Model, tp, rank int) (*rankKV, error) {
	v, err := newView(m, tp, rank, nil)
	if err != nil {
		return nil, err
	}
	k := &rankKV{kvView: v}
	if k.buf, err = nixl.AllocBuffer(k.regionLen() * m.Layers); err != nil {
		return nil, fmt.Errorf("vllmpeer: KV memory of rank %d: %w", rank, err)
	}
	k.mem = k.buf.Bytes()
	return k, nil
}

func (k *kvView) regionLen() int { return k.m.NumBlocks * k.blockLen }

func (k *rankKV) regionBase(layer int) uint64 { return k.buf.Addr() + uint64(layer*k.regionLen()) }

// firstHead is the model index of this rank's first head.
func (k *kvView) firstHead() int { return k.tpRank * k.heads }

// row returns the bytes of (layer, local head h, slot s) of block b.
func (k *kvView) row(layer, b, h, s int) []byte {
	off := layer*k.regionLen() + b*k.blockLen + (h*k.m.BlockSize+s)*k.m.rowBytes()
	return k.mem[off : off+k.m.rowBytes()]
}

// regList registers the whole buffer: vLLM registers one descriptor per
// backing storage.
func (k *rankKV) regList() nixl.RegList {
	return nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{k.buf.RegDesc()}}
}

// blockDescs is vLLM's local transfer list split n ways: for each region,
// each block, each of the n parts of the block (len blockLen/n), the part
// `part`. n = 1 gives one descriptor per (region, block); its index is
// region*NumBlocks + block, the descriptor id vLLM's fast path computes.
func (k *rankKV) blockDescs(n, part int) nixl.XferList {
	l := nixl.XferList{Mem: nixl.DRAM, Descs: make([]nixl.Desc, 0, k.m.Layers*k.m.NumBlocks)}
	chunk := uint64(k.blockLen / n)
	for r := range k.m.Layers {
		for b := range k.m.NumBlocks {
			l.Descs = append(l.Descs, nixl.Desc{Addr: k.regionBase(r) + uint64(b*k.blockLen) + uint64(part)*chunk, Len: chunk})
		}
	}
	return l
}

// fill writes a prompt's KV into blocks (the request's blocks in order):
// FillRow for positions of the prompt, zeros for the rest of the last block.
func (k *kvView) fill(blocks []int, ph []uint64) {
	for layer := range k.m.Layers {
		k.fillLayer(layer, blocks, 0, ph)
	}
}

// fillLayer is fill for one layer's blocks, the request's blocks from its
// block first on.
func (k *kvView) fillLayer(layer int, blocks []int, first int, ph []uint64) {
	k.visitLayerFrom(layer, blocks, first, func(row []byte, layer, head, t int) {
		if t < len(ph) {
			FillRow(row, ph[t], layer, head, t)
		} else {
			clear(row)
		}
	})
}

// Check is what a check of a request's KV found.
type Check struct {
	OKBytes, BadBytes uint64
	First             string // the first wrong row, "" when none
}

// checkFrom compares blocks, the request's blocks from block first on,
// with what fill writes.
func (k *kvView) checkFrom(blocks []int, first int, ph []uint64) Check {
	var c Check
	for layer := range k.m.Layers {
		lc := k.checkLayerFrom(layer, blocks, first, ph)
		c.OKBytes += lc.OKBytes
		c.BadBytes += lc.BadBytes
		if c.First == "" {
			c.First = lc.First
		}
	}
	return c
}

// checkLayerFrom is checkFrom for one layer.
func (k *kvView) checkLayerFrom(layer int, blocks []int, first int, ph []uint64) Check {
	var c Check
	want := make([]byte, k.m.rowBytes())
	k.visitLayerFrom(layer, blocks, first, func(row []byte, layer, head, t int) {
		if t < len(ph) {
			FillRow(want, ph[t], layer, head, t)
		} else {
			clear(want)
		}
		for i := range row {
			if row[i] != want[i] {
				if c.First == "" {
					c.First = fmt.Sprintf("rank %d layer %d head %d token %d byte %d: got %#02x, want %#02x", k.tpRank, layer, head, t, i, row[i], want[i])
				}
				c.BadBytes += uint64(len(row))
				return
			}
		}
		c.OKBytes += uint64(len(row))
	})
	return c
}

// visitLayerFrom visits one layer's blocks holding the request's blocks
// from its block first on (a decode that had the first ones cached holds
// only the rest).
func (k *kvView) visitLayerFrom(layer int, blocks []int, first int, f func(row []byte, layer, head, t int)) {
	bs := k.m.BlockSize
	for bi, b := range blocks {
		for h := range k.heads {
			for s := range bs {
				f(k.row(layer, b, h, s), layer, k.firstHead()+h, (first+bi)*bs+s)
			}
		}
	}
}

func (k *kvView) checkBlocks(blocks []int) error {
	for i, b := range blocks {
		if b < 0 || b >= k.m.NumBlocks {
			return fmt.Errorf("vllmpeer: block id %d (index %d) is outside [0, %d)", b, i, k.m.NumBlocks)
		}
	}
	return nil
}
