package vllmpeer

import (
	"encoding/binary"
	"hash/fnv"
	"strings"
)

// The reference engine's deterministic KV content, implemented from
// docs/kvfill.md (not from the engine's code), so that a prefill of either
// writes bytes the other's decode can check.

// VocabSize is the reference engine's vocabulary: token ids are below it.
const VocabSize = 32000

// Tokenize is the reference engine's tokenizer: the prompt split at runs of
// Unicode white space, each word's id the 32-bit FNV-1a hash of its UTF-8
// bytes modulo VocabSize.
func Tokenize(text string) []int {
	words := strings.Fields(text)
	ids := make([]int, len(words))
	for i, w := range words {
		h := fnv.New32a()
		h.Write([]byte(w))
		ids[i] = int(h.Sum32() % VocabSize)
	}
	return ids
}

// splitmix is splitmix64's output step: add the golden gamma, then the two
// xor-shift-multiply rounds and a final xor-shift.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// PrefixHashes returns, for each position t of the prompt, the hash of
// tokens[0..t]: a chain from a fixed start, so that a token's KV depends on
// every token before it, as a real model's does.
func PrefixHashes(tokens []int) []uint64 {
	out := make([]uint64, len(tokens))
	x := uint64(0x6a09e667f3bcc909)
	for t, tok := range tokens {
		x = splitmix(x ^ (uint64(tok) * 0x100000001b3))
		out[t] = x
	}
	return out
}

// FillRow writes the content of one row: the bytes of one KV head for one
// token in one region (a layer, with K and V packed), for a prompt whose
// prefix hash at t is ph. head is the model's head index, not the rank's.
func FillRow(row []byte, ph uint64, region, head, t int) {
	key := splitmix(uint64(region)<<40 ^ uint64(head)<<24 ^ uint64(t))
	seed := splitmix(ph ^ key)
	var w [8]byte
	for off := 0; off < len(row); off += 8 {
		binary.LittleEndian.PutUint64(w[:], splitmix(seed+uint64(off)))
		copy(row[off:], w[:])
	}
}
