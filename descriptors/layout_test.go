package descriptors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/nixl"
)

func TestLayoutLists(t *testing.T) {
	// 2 layers, 3 blocks of 4 tokens x 2 heads x 8 bytes = 64 bytes.
	l := &Layout{Mem: nixl.VRAM, NumLayers: 2, NumBlocks: 3, BlockSize: 4, KVHeads: 2, HeadBytes: 8,
		DType: "bfloat16", TPSize: 1,
		Regions: []Region{{Base: 0x1000, DevID: 3}, {Base: 0x2000, DevID: 3}, {Base: 0x3000, DevID: 3}, {Base: 0x4000, DevID: 3}}}
	require.NoError(t, l.Validate())
	assert.Equal(t, uint64(64), l.BlockLen())
	assert.Equal(t, uint64(192), l.RegionLen())
	assert.Equal(t, 4, l.NumRegions())

	reg := l.RegList()
	assert.Equal(t, nixl.VRAM, reg.Mem)
	require.Len(t, reg.Descs, 4)
	for i, d := range reg.Descs {
		assert.Equal(t, nixl.Desc{Addr: uint64(i+1) * 0x1000, Len: 192, DevID: 3}, d.Desc)
		assert.Nil(t, d.Meta)
	}

	blocks := l.BlockDescs()
	assert.Equal(t, nixl.VRAM, blocks.Mem)
	require.Len(t, blocks.Descs, 12)
	assert.Equal(t, 7, l.DescID(2, 1))
	assert.Equal(t, nixl.Desc{Addr: 0x3040, Len: 64, DevID: 3}, blocks.Descs[7])
	assert.Equal(t, nixl.Desc{Addr: 0x4080, Len: 64, DevID: 3}, blocks.Descs[11])
	for r := 0; r < 4; r++ {
		for b := 0; b < 3; b++ {
			assert.Equal(t, blocks.Descs[l.DescID(r, b)], l.BlockDesc(r, b))
		}
	}
}

func TestValidateOverlap(t *testing.T) {
	l := &Layout{Mem: nixl.DRAM, NumLayers: 1, NumBlocks: 4, BlockSize: 1, KVHeads: 1, HeadBytes: 16,
		DType: "bfloat16", TPSize: 1, Regions: []Region{{Base: 1000}, {Base: 1063}}}
	err := l.Validate()
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "descriptors: Regions[0] (base 0x3e8) and Regions[1] (base 0x427) overlap on device 0 (region length 64)", err.Error())
	l.Regions[1].Base = 1064 // back to back is fine
	assert.NoError(t, l.Validate())
	l.Regions[1] = Region{Base: 1000, DevID: 1} // same address, other device
	assert.NoError(t, l.Validate())
}

func TestHeads(t *testing.T) {
	split := rankLayout(false, 2, 0, 3, 4)
	assert.Equal(t, 8, split.TotalKVHeads())
	assert.Equal(t, 6, split.FirstHead())
	repl := rankLayout(false, 1, 8, 13, 16)
	assert.Equal(t, 8, repl.TotalKVHeads())
	assert.Equal(t, 6, repl.FirstHead())
	mla := rankLayout(true, 1, 0, 3, 4)
	assert.Equal(t, 1, mla.TotalKVHeads())
	assert.Equal(t, 0, mla.FirstHead())
}

func TestLayoutMsgpackRoundTrip(t *testing.T) {
	l := rankLayout(false, 1, 8, 13, 16)
	l.Mem = nixl.VRAM
	l.Regions[1].DevID = 5
	b, err := msgpack.Marshal(l)
	require.NoError(t, err)
	var got Layout
	require.NoError(t, msgpack.Unmarshal(b, &got))
	assert.Equal(t, *l, got)

	// The field names on the wire are the documented snake_case keys.
	var m map[string]any
	require.NoError(t, msgpack.Unmarshal(b, &m))
	for _, k := range []string{"mem", "regions", "num_layers", "num_blocks", "block_size", "kv_heads",
		"model_kv_heads", "head_bytes", "dtype", "mla", "tp_rank", "tp_size"} {
		assert.Contains(t, m, k)
	}
	regions := m["regions"].([]any)
	assert.Equal(t, map[string]any{"base": uint64(2) << 32, "dev_id": uint64(5)}, regions[1])
}
