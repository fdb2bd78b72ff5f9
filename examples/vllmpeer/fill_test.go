package vllmpeer

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The worked example of docs/kvfill.md: the numbers the page gives are the
// ones this implementation computes (and the reference engine's, which the
// tests against it check byte for byte).
func TestKVFillWorkedExample(t *testing.T) {
	toks := Tokenize("The quick  brown\tfox")
	require.Equal(t, []int{8636, 14012, 12335, 8270}, toks)
	assert.Equal(t, []uint64{0x36c2a1d5c60558df, 0x576e8e829e560367, 0xbd3e0508f27a1016, 0x8c8b5068afec60a5}, PrefixHashes(toks))
	ph := PrefixHashes(toks)
	assert.Equal(t, uint64(0x95426611d9f3fdc2), splitmix(uint64(0)<<40^uint64(2)<<24^uint64(len(toks)-4)))
	assert.Equal(t, uint64(0x856444247ead2de4), splitmix(ph[0]^splitmix(uint64(2)<<24)))

	m := Model{Name: "x", DType: "bfloat16", ElemBytes: 2, Layers: 2, KVHeads: 4, HeadDim: 4, BlockSize: 16, NumBlocks: 8}
	mem := make([]byte, m.RankBytes(2))
	require.NoError(t, FillKV(mem, m, 2, 1, toks, []int{5}))
	assert.Equal(t, "0b3859e5a869854fd3251221e66fd51d"+"bbba5cfef4fdfe36a56b801c5fe95798"+"27ae1ad2656729d2da395b54d4b57880", hex.EncodeToString(mem[2560:2560+48]))
	assert.Equal(t, make([]byte, 16), mem[2560+4*16:2560+5*16], "past the prompt")
	assert.Equal(t, "0c7a209aedcfb600e22dbe4b0ccb41a9", hex.EncodeToString(mem[4096+2560:4096+2560+16]))
	row := make([]byte, 20)
	FillRow(row, ph[0], 0, 2, 0)
	assert.Equal(t, "0b3859e5a869854fd3251221e66fd51d3d6a6d15", hex.EncodeToString(row))

	c, err := CheckKV(mem, m, 2, 1, toks, []int{5})
	require.NoError(t, err)
	assert.Equal(t, Check{OKBytes: 2 * 16 * 2 * 16}, c)
	mem[2560+16*3+1] ^= 1 // head 2, token 3, byte 1
	c, err = CheckKV(mem, m, 2, 1, toks, []int{5})
	require.NoError(t, err)
	assert.Equal(t, uint64(16), c.BadBytes)
	assert.Equal(t, "rank 1 layer 0 head 2 token 3 byte 1: got 0x"+hex.EncodeToString(mem[2560+49:2560+50])+", want 0x"+hex.EncodeToString([]byte{mem[2560+49] ^ 1}), c.First)
	_, err = CheckKV(mem[:100], m, 2, 1, toks, []int{5})
	assert.EqualError(t, err, "vllmpeer: KV memory of rank 1 is 100 bytes, want 8192")
	assert.EqualError(t, FillKV(mem, m, 2, 1, toks, []int{8}), "vllmpeer: block id 8 (index 0) is outside [0, 8)")
}
