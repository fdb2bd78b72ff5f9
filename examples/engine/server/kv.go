package server

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/gonixl/gonixl/descriptors"
)

// Tokenize is the engine's tokenizer: one token per whitespace-separated
// word, its id the word's FNV-1a hash modulo VocabSize.
func Tokenize(text string) []int {
	words := strings.Fields(text)
	toks := make([]int, len(words))
	for i, w := range words {
		h := fnv.New32a()
		h.Write([]byte(w))
		toks[i] = int(h.Sum32() % VocabSize)
	}
	return toks
}

// Detokenize renders a token as a word.
func Detokenize(tok int) string { return "t" + strconv.Itoa(tok) }

func mix64(x uint64) uint64 { // splitmix64's finalizer
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// prefixHashes returns h[t], a hash of tokens[0..t].
func prefixHashes(tokens []int) []uint64 {
	h := make([]uint64, len(tokens))
	var x uint64 = 0x6a09e667f3bcc909
	for t, tok := range tokens {
		x = mix64(x ^ uint64(tok)*0x100000001b3)
		h[t] = x
	}
	return h
}

func rowKey(region, head, t int) uint64 {
	return mix64(uint64(region)<<40 ^ uint64(head)<<24 ^ uint64(t))
}

// fillRow writes the KV content of (region, model head, token t) of a prompt
// whose prefix hash at t is ph.
func fillRow(row []byte, ph uint64, region, head, t int) {
	seed := mix64(ph ^ rowKey(region, head, t))
	i := 0
	for ; i+8 <= len(row); i += 8 {
		binary.LittleEndian.PutUint64(row[i:], mix64(seed+uint64(i)))
	}
	if i < len(row) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix64(seed+uint64(i)))
		copy(row[i:], w[:])
	}
}

func hashRow(row []byte) uint64 {
	var h uint64 = 0xcbf29ce484222325
	i := 0
	for ; i+8 <= len(row); i += 8 {
		h = (h ^ binary.LittleEndian.Uint64(row[i:])) * 0x100000001b3
	}
	for ; i < len(row); i++ {
		h = (h ^ uint64(row[i])) * 0x100000001b3
	}
	return mix64(h)
}

// visitRows calls f on every (head, token) row of blocks on rank layout l,
// in the rank's KV buffer mem, with the model head and prompt position.
func visitRows(l *descriptors.Layout, mem []byte, blocks []int, f func(row []byte, region, head, t int)) {
	bl, rl, hb, bs := int(l.BlockLen()), int(l.RegionLen()), l.HeadBytes, l.BlockSize
	first := l.FirstHead()
	// A pipeline stage's regions are its own layers': f sees the model's
	// region index, so a stage's content is the whole model's there.
	shift := l.FirstLayer * l.NumRegions() / l.NumLayers
	for region := range l.NumRegions() {
		for bi, blk := range blocks {
			base := region*rl + blk*bl
			for hh := range l.KVHeads {
				for tok := range bs {
					off := base + rowSlot(l, hh, tok)*hb
					f(mem[off:off+hb], region+shift, first+hh, bi*bs+tok)
				}
			}
		}
	}
}

// rowSlot returns the row index, within an attention block of layout l, of
// the rank's hh-th head at slot tok: head-major (HND, hh*block_size + tok)
// or token-major for an NHD layout (tok*heads_per_rank + hh).
func rowSlot(l *descriptors.Layout, hh, tok int) int {
	if l.Order == descriptors.OrderNHD {
		return tok*l.KVHeads + hh
	}
	return hh*l.BlockSize + tok
}

// writeKV writes a prompt's KV into blocks: the pattern for positions of the
// prompt, zeros for the rest of the last block.
func writeKV(l *descriptors.Layout, mem []byte, blocks []int, ph []uint64) {
	if len(l.Groups) > 0 {
		writeKVGroups(l, mem, blocks, ph)
		return
	}
	visitRows(l, mem, blocks, func(row []byte, region, head, t int) {
		if t < len(ph) {
			fillRow(row, ph[t], region, head, t)
		} else {
			clear(row)
		}
	})
}

// kvCheck is the result of checking one rank's blocks.
type kvCheck struct {
	okBytes, badBytes uint64
	first             string // the first mismatch
	checksum          uint64 // of the bytes held, whatever they are
}

// checkKV compares blocks with the prompt's pattern and sums a checksum of
// the prompt rows actually held: it depends on (region, model head, token)
// and the bytes only, so engines of different TP sizes agree.
func checkKV(l *descriptors.Layout, mem []byte, blocks []int, ph []uint64) kvCheck {
	if len(l.Groups) > 0 {
		return checkKVGroups(l, mem, blocks, ph)
	}
	var c kvCheck
	counts := true // replicated heads (TP > KV heads) count once
	if total := l.TotalKVHeads(); !l.MLA && l.TPSize > total {
		counts = l.TPRank%(l.TPSize/total) == 0
	}
	want := make([]byte, l.HeadBytes)
	visitRows(l, mem, blocks, func(row []byte, region, head, t int) {
		if t < len(ph) {
			fillRow(want, ph[t], region, head, t)
			if counts {
				c.checksum += mix64(rowKey(region, head, t) ^ hashRow(row))
			}
		} else {
			clear(want)
		}
		for i := range row {
			if row[i] != want[i] {
				if c.first == "" {
					c.first = fmt.Sprintf("rank %d region %d head %d token %d byte %d: got %#02x, want %#02x", l.TPRank, region, head, t, i, row[i], want[i])
				}
				c.badBytes += uint64(len(row))
				return
			}
		}
		c.okBytes += uint64(len(row))
	})
	return c
}

// outputToken is the j-th generated token of a request whose KV checksum
// is sum: the KV decides the text, so wrong KV gives other text.
func outputToken(sum uint64, j int) int {
	return int(mix64(sum^mix64(uint64(j)+1)) % VocabSize)
}

func blocksFor(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
