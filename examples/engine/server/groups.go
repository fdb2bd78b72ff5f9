package server

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gonixl/gonixl/descriptors"
)

// A grouped model (ModelSpec.Groups) keeps its KV cache in KV-cache
// groups, as vLLM's hybrid KV-cache manager does. The engine allocates one
// list of blocks per request, as for any model, and gives each group its
// list out of it (the groups have regions of their own, so one block id
// names a different block in each group):
//   - full attention: every prompt block;
//   - sliding window: the prompt blocks that hold the window (the last
//     Window tokens), as vLLM lists a sliding-window group;
//   - SSM (Mamba) state: one state slot, the id of the last prompt block.
//
// Attention rows hold the same bytes as in a model without groups
// (fillRow, keyed by region, model head and token); a state slot holds, for
// each SSM layer (region) and part (conv x, B, C, then the temporal state),
// bytes that are a function of the whole prompt (its last prefix hash),
// the region, the part and the byte's place in the model's part, so that
// engines of different TP sizes agree on them.

// demoGroups returns the grouped demo presets' models.
func demoGroups(name string) ModelSpec {
	m := ModelSpec{Name: name, Layers: 4, KVHeads: 4, HeadDim: 64, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 2}
	switch name {
	case "swa-demo": // gpt-oss style: full-attention layers beside sliding-window ones
		m.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 2}, {Kind: descriptors.KindSlidingWindow, Layers: 2, Window: 128}}
	case "hybrid-demo": // Nemotron-H / Qwen3-Next style: attention beside Mamba2 layers
		m.Layers = 3
		m.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 1},
			{Kind: descriptors.KindSSM, Layers: 2, Conv: []int{3 * 1024, 3 * 128, 3 * 128}, State: 8 * 64 * 16 * 2}}
	}
	return m
}

// demoGroupsCompute is the grouped demos' compute model: a small model on
// one GPU.
var demoGroupsCompute = ComputeModel{PrefillBase: 2 * time.Millisecond, PrefillPerToken: 10 * time.Microsecond,
	DecodeBase: 4 * time.Millisecond, DecodePerSeq: 50 * time.Microsecond}

// groupLists returns each group's list of a request of tokens tokens whose
// prompt blocks are blocks, on layout l.
func groupLists(l *descriptors.Layout, blocks []int, tokens int) [][]int {
	gs := l.GroupList()
	out := make([][]int, len(gs))
	for i, g := range gs {
		switch {
		case len(blocks) == 0:
			out[i] = []int{}
		case g.Kind == descriptors.KindSSM:
			out[i] = []int{blocks[len(blocks)-1]}
		case g.Kind == descriptors.KindSlidingWindow:
			out[i] = append([]int{}, blocks[max(tokens-g.Window, 0)/l.BlockSize:]...)
		default:
			out[i] = append([]int{}, blocks...)
		}
	}
	return out
}

// visitGroups calls row on every (head, token) row of the attention
// groups' lists and state on every 8-byte word (or shorter tail) of the
// SSM groups' slots, on rank layout l whose KV buffer is mem. first is the
// first prompt position of each attention list.
func visitGroups(l *descriptors.Layout, mem []byte, lists [][]int, tokens int,
	row func(b []byte, region, head, t int), state func(b []byte, region, part, at int)) {
	base0 := l.Regions[0].Base
	hb, bs := l.HeadBytes, l.BlockSize
	for gi, g := range l.GroupList() {
		ids := lists[gi]
		for _, reg := range g.Regions {
			base, bl := int(l.Regions[reg].Base-base0), int(l.BlockLenOf(reg))
			if g.Kind == descriptors.KindSSM {
				for _, slot := range ids {
					off := base + slot*bl
					parts := append(append([]int{}, g.SSM.Conv...), g.SSM.State)
					for p, n := range parts {
						for i := 0; i < n; i += 8 {
							state(mem[off+i:off+min(i+8, n)], reg, p, l.TPRank*n+i)
						}
						off += n
					}
				}
				continue
			}
			first := (blocksFor(tokens, bs) - len(ids)) * bs
			for bi, blk := range ids {
				for hh := range l.KVHeads {
					for tok := range bs {
						off := base + blk*bl + rowSlot(l, hh, tok)*hb
						row(mem[off:off+hb], reg, l.FirstHead()+hh, first+bi*bs+tok)
					}
				}
			}
		}
	}
}

// stateWord is the content of the state word at byte at of part of SSM
// layer region, of a prompt whose last prefix hash is last.
func stateWord(last uint64, region, part, at int) uint64 {
	return mix64(last ^ mix64(uint64(region)<<48^uint64(part)<<40^uint64(at)))
}

// writeKVGroups is writeKV for a grouped layout: blocks are the prompt's
// blocks, ph its prefix hashes.
func writeKVGroups(l *descriptors.Layout, mem []byte, blocks []int, ph []uint64) {
	if len(ph) == 0 {
		return
	}
	last := ph[len(ph)-1]
	visitGroups(l, mem, groupLists(l, blocks, len(ph)), len(ph), func(row []byte, region, head, t int) {
		if t < len(ph) {
			fillRow(row, ph[t], region, head, t)
		} else {
			clear(row)
		}
	}, func(b []byte, region, part, at int) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], stateWord(last, region, part, at))
		copy(b, w[:])
	})
}

// checkKVGroups is checkKV for a grouped layout. Its checksum covers the
// rows and state words a rank holds, keyed so that engines of different
// TP sizes agree.
func checkKVGroups(l *descriptors.Layout, mem []byte, blocks []int, ph []uint64) kvCheck {
	var c kvCheck
	if len(ph) == 0 {
		return c
	}
	last := ph[len(ph)-1]
	counts := true // replicated heads (TP > KV heads) count once
	if total := l.TotalKVHeads(); l.TPSize > total {
		counts = l.TPRank%(l.TPSize/total) == 0
	}
	want := make([]byte, l.HeadBytes)
	bad := func(what string, got, w []byte) bool {
		for i := range got {
			if got[i] != w[i] {
				if c.first == "" {
					c.first = fmt.Sprintf("rank %d %s byte %d: got %#02x, want %#02x", l.TPRank, what, i, got[i], w[i])
				}
				c.badBytes += uint64(len(got))
				return true
			}
		}
		c.okBytes += uint64(len(got))
		return false
	}
	visitGroups(l, mem, groupLists(l, blocks, len(ph)), len(ph), func(row []byte, region, head, t int) {
		if t < len(ph) {
			fillRow(want, ph[t], region, head, t)
			if counts {
				c.checksum += mix64(rowKey(region, head, t) ^ hashRow(row))
			}
		} else {
			clear(want)
		}
		bad(fmt.Sprintf("region %d head %d token %d", region, head, t), row, want)
	}, func(b []byte, region, part, at int) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], stateWord(last, region, part, at))
		c.checksum += mix64(uint64(region)<<48 ^ uint64(part)<<40 ^ uint64(at) ^ hashRow(b))
		bad(fmt.Sprintf("state region %d part %d at %d", region, part, at), b, w[:len(b)])
	})
	return c
}
