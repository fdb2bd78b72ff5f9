package descriptors

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/nixl"
)

// Split at every layer, the per-layer lists put together are
// MapCoalescedInto's, region for region: every (block, region) once.
func TestMapLayersIntoSplitsTheWhole(t *testing.T) {
	mla := qwen(16, 0, 1, 1<<40)
	mla.MLA, mla.KVHeads = true, 1
	mla.Regions = mla.Regions[:mla.NumRegions()]
	mlaDst := regionsAt(mla, 1<<41)
	packed := qwen(16, 0, 1, 1<<40)
	packed.KVPacked, packed.HeadBytes = true, 512
	packed.Regions = packed.Regions[:packed.NumRegions()]
	packedDst := regionsAt(packed, 1<<41)
	req := Request{SrcBlocks: ids(8, 0, 2), DstBlocks: ids(8, 3, 1)}
	for name, pair := range map[string][2]*Layout{
		"K and V":            {qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41)},
		"K and V, TP 1 to 2": {qwen(16, 0, 1, 1<<40), qwen(16, 1, 2, 1<<41)},
		"MLA":                {mla, &mlaDst},
		"KVPacked":           {packed, &packedDst},
	} {
		t.Run(name, func(t *testing.T) {
			src, dst := pair[0], pair[1]
			var whole Transfer
			_, err := MapCoalescedInto(&whole, src, dst, req)
			require.NoError(t, err)
			var joined Transfer
			for _, cut := range [][2]int{{0, 1}, {1, 2}, {2, 40}, {40, 40}, {40, 64}} {
				var part Transfer
				st, err := MapLayersInto(&part, src, dst, req, cut[0], cut[1])
				require.NoError(t, err)
				per := src.NumRegions() / src.NumLayers
				assert.Equal(t, whole.Len()/len(src.Regions)*per*(cut[1]-cut[0]), part.Len(), "layers %v", cut)
				assert.Equal(t, part.Len(), st.After)
				joined.Src.Descs = append(joined.Src.Descs, part.Src.Descs...)
				joined.Dst.Descs = append(joined.Dst.Descs, part.Dst.Descs...)
				joined.Bytes += part.Bytes
			}
			assert.Equal(t, whole.Src.Descs, joined.Src.Descs)
			assert.Equal(t, whole.Dst.Descs, joined.Dst.Descs)
			assert.Equal(t, whole.Bytes, joined.Bytes)
		})
	}
}

// A pipeline stage counts its layers from its FirstLayer: its layer 1 is
// the model's layer 3, decode's regions 6 and 7.
func TestMapLayersIntoStage(t *testing.T) {
	g := Geometry{Layers: 4, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 4, Blocks: 2, TPSize: 1, PPSize: 2}
	s1, err := g.StageLayout(nixl.DRAM, 1, 0, nixl.Desc{Addr: 0x10000, Len: g.StageBytes(1)})
	require.NoError(t, err)
	whole := g
	whole.PPSize = 0
	d, err := whole.Layout(nixl.DRAM, 0, nixl.Desc{Addr: 0x80000, Len: whole.RankBytes()})
	require.NoError(t, err)
	var tr Transfer
	_, err = MapLayersInto(&tr, &s1, &d, Request{SrcBlocks: []int{1}, DstBlocks: []int{0}}, 1, 2)
	require.NoError(t, err)
	require.Equal(t, 2, tr.Len())
	for i, desc := range tr.Dst.Descs {
		assert.Equal(t, d.BlockDesc(6+i, 0), desc, "pair %d", i)
		assert.Equal(t, s1.BlockDesc(2+i, 1), tr.Src.Descs[i], "pair %d", i)
	}
}

func TestMapLayersIntoErrors(t *testing.T) {
	src, dst := qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41)
	req := Request{SrcBlocks: []int{0}, DstBlocks: []int{1}}
	var buf Transfer
	_, err := MapLayersInto(nil, src, dst, req, 0, 1)
	assert.Equal(t, "descriptors: MapLayersInto: buf is nil", err.Error())
	for _, cut := range [][2]int{{-1, 1}, {2, 1}, {0, 65}} {
		_, err = MapLayersInto(&buf, src, dst, req, cut[0], cut[1])
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Equal(t, fmt.Sprintf("descriptors: layers [%d, %d) outside the source's 64", cut[0], cut[1]), err.Error())
	}
	_, err = MapLayersInto(&buf, src, dst, Request{SrcBlocks: []int{0}, DstBlocks: []int{4096}}, 0, 1)
	assert.Equal(t, "descriptors: destination block id 4096 at index 0 out of range [0, 4096)", err.Error())
	assert.Equal(t, Transfer{}, buf)
}

// regionsAt returns a copy of l whose regions lie back to back from base.
func regionsAt(l *Layout, base uint64) Layout {
	c := *l
	c.Regions = make([]Region, len(l.Regions))
	for i := range c.Regions {
		c.Regions[i] = Region{Base: base + uint64(i)*l.RegionLen()}
	}
	return c
}
