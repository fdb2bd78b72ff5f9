package main

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/gonixl/gonixl/examples/vllmpeer"
)

// The text a request must get, computed here from docs/kvfill.md: decode's
// tokens come from a checksum of the KV it holds, so the text of a request
// whose KV arrived intact equals this, and KV that arrived wrong gives
// other text. Tokenizer, prefix hashes and row fill are examples/vllmpeer's
// (written from the same page, not from the engine); the checksum and the
// output tokens are written here.

// geometry is what the expected text depends on: the model's KV regions
// (gonixl's protocol: K and V of each layer), its KV heads and the bytes of
// one row. The TP size plays no part.
type geometry struct {
	Layers, KVHeads, HeadDim, DTypeBytes int
}

func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// hashRow is kvfill.md's FNV-style hash of a row's 8-byte words and its
// remaining bytes, finished with mix.
func hashRow(row []byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	i := 0
	for ; i+8 <= len(row); i += 8 {
		h = (h ^ binary.LittleEndian.Uint64(row[i:])) * 0x100000001b3
	}
	for ; i < len(row); i++ {
		h = (h ^ uint64(row[i])) * 0x100000001b3
	}
	return mix(h)
}

// expectedText is the text of maxTokens tokens that a request of prompt
// (already rendered: a chat's messages through server.ChatPrompt) gets from
// a decode engine of geometry g, tokens joined by single spaces.
func expectedText(g geometry, prompt string, maxTokens int) string {
	tokens := vllmpeer.Tokenize(prompt)
	ph := vllmpeer.PrefixHashes(tokens)
	row := make([]byte, g.HeadDim*g.DTypeBytes)
	var sum uint64
	for region := range 2 * g.Layers {
		for head := range g.KVHeads {
			for t := range tokens {
				vllmpeer.FillRow(row, ph[t], region, head, t)
				key := mix(uint64(region)<<40 ^ uint64(head)<<24 ^ uint64(t))
				sum += mix(key ^ hashRow(row))
			}
		}
	}
	words := make([]string, maxTokens)
	for j := range words {
		words[j] = "t" + strconv.Itoa(int(mix(sum^mix(uint64(j)+1))%vllmpeer.VocabSize))
	}
	return strings.Join(words, " ")
}
