package descriptors

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/nixl"
)

// wireVectors are single-group layouts and their exact msgpack bytes as the
// handshake carried them before KV-cache groups and the in-block order
// existed (recorded from the encoder at commit a05efe5). The fields added
// since (order, groups) are omitted when they hold their defaults, so an
// older peer and a newer one exchange identical bytes for these layouts.
var wireVectors = []struct {
	name   string
	layout Layout
	hex    string
}{
	{
		name: "K and V regions, TP 1",
		layout: Layout{Mem: nixl.VRAM, Regions: []Region{{Base: 0x7f0000000000, DevID: 1}, {Base: 0x7f0000100000, DevID: 1}},
			NumLayers: 1, NumBlocks: 16, BlockSize: 16, KVHeads: 8, HeadBytes: 256, DType: "bfloat16", TPSize: 1},
		hex: "8ba36d656dd200000001a7726567696f6e739282a462617365cf00007f0000000000a66465765f6964cf000000000000000182a462617365cf00007f0000100000a66465765f6964cf0000000000000001aa6e756d5f6c617965727301aa6e756d5f626c6f636b7310aa626c6f636b5f73697a6510a86b765f686561647308aa686561645f6279746573cd0100a56474797065a862666c6f61743136a36d6c61c2a774705f72616e6b00a774705f73697a6501",
	},
	{
		name: "packed, replicated head, rank 1 of 2",
		layout: Layout{Mem: nixl.DRAM, Regions: []Region{{Base: 4096}}, NumLayers: 1, NumBlocks: 4, BlockSize: 32, KVHeads: 1,
			ModelKVHeads: 1, HeadBytes: 1152, DType: "float8_e4m3fn", KVPacked: true, TPRank: 1, TPSize: 2},
		hex: "8da36d656dd200000000a7726567696f6e739182a462617365cf0000000000001000a66465765f6964cf0000000000000000aa6e756d5f6c617965727301aa6e756d5f626c6f636b7304aa626c6f636b5f73697a6520a86b765f686561647301ae6d6f64656c5f6b765f686561647301aa686561645f6279746573cd0480a56474797065ad666c6f6174385f65346d33666ea36d6c61c2a96b765f7061636b6564c3a774705f72616e6b01a774705f73697a6502",
	},
}

// TestLayoutWireVectors pins the handshake bytes of single-group layouts:
// encoding gives exactly the recorded bytes, and decoding them gives the
// layout back.
func TestLayoutWireVectors(t *testing.T) {
	for _, v := range wireVectors {
		t.Run(v.name, func(t *testing.T) {
			b, err := msgpack.Marshal(&v.layout)
			require.NoError(t, err)
			assert.Equal(t, v.hex, hex.EncodeToString(b))
			raw, err := hex.DecodeString(v.hex)
			require.NoError(t, err)
			var got Layout
			require.NoError(t, msgpack.Unmarshal(raw, &got))
			assert.Equal(t, v.layout, got)
		})
	}
}
