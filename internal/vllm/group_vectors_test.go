package vllm

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// groupVectors is testdata/vllm/groups.json (gen_groups.py): the metadata
// of ranks of grouped models, the layout each maps to, and metadata the
// local model refuses.
type groupVectors struct {
	Source  string             `json:"source"`
	Cases   []groupVector      `json:"grouped_metadata"`
	Invalid []groupInvalidCase `json:"grouped_metadata_invalid"`
}

type geometryVector struct {
	Layers    int    `json:"layers"`
	KVHeads   int    `json:"kv_heads"`
	HeadDim   int    `json:"head_dim"`
	DType     string `json:"dtype"`
	BlockSize int    `json:"block_size"`
	Blocks    int    `json:"blocks"`
	Groups    []struct {
		Kind   descriptors.GroupKind `json:"kind"`
		Layers int                   `json:"layers"`
		Window int                   `json:"window"`
		Conv   []int                 `json:"conv"`
		State  int                   `json:"state"`
	} `json:"groups"`
}

// geometry is the local model's geometry, at TP size tp.
func (v geometryVector) geometry(tp int) descriptors.Geometry {
	g := descriptors.Geometry{Layers: v.Layers, KVHeads: v.KVHeads, HeadDim: v.HeadDim, DType: v.DType, BlockSize: v.BlockSize,
		Blocks: v.Blocks, TPSize: tp, KVPacked: true}
	if len(v.Groups) > 0 {
		gs := make([]descriptors.GroupGeometry, len(v.Groups))
		for i, x := range v.Groups {
			gs[i] = descriptors.GroupGeometry{Kind: x.Kind, Layers: x.Layers, Window: x.Window, Conv: x.Conv, State: x.State}
		}
		g.Groups = &gs
	}
	return g
}

type groupVector struct {
	Name     string         `json:"name"`
	Geometry geometryVector `json:"geometry"`
	PeerTP   int            `json:"peer_tp"`
	Rank     int            `json:"rank"`
	KVLayout string         `json:"kv_layout"`
	Value    metadataValue  `json:"value"`
	Hex      string         `json:"hex"`
	Layout   struct {
		Order     string              `json:"order"`
		BlockSize int                 `json:"block_size"`
		NumBlocks int                 `json:"num_blocks"`
		KVHeads   int                 `json:"kv_heads"`
		HeadBytes int                 `json:"head_bytes"`
		Groups    []descriptors.Group `json:"groups"`
	} `json:"layout"`
}

type groupInvalidCase struct {
	Name     string         `json:"name"`
	Geometry geometryVector `json:"geometry"`
	PeerTP   int            `json:"peer_tp"`
	Rank     int            `json:"rank"`
	Hex      string         `json:"hex"`
	Error    string         `json:"error"`
}

func readGroupVectors() (*groupVectors, error) {
	raw, err := os.ReadFile("../../testdata/vllm/groups.json")
	if err != nil {
		return nil, err
	}
	var v groupVectors
	return &v, json.Unmarshal(raw, &v)
}

func loadGroupVectors(t *testing.T) *groupVectors {
	t.Helper()
	v, err := readGroupVectors()
	require.NoError(t, err)
	require.Len(t, v.Cases, 3)
	require.Len(t, v.Invalid, 6)
	return v
}

// TestGroupMetadataVectors decodes each grouped rank's metadata to the
// vector's value, maps it with the local model's geometry to the layout the
// vector gives (groups, their regions, SSM state and page, the ratio, the
// order), and publishes that layout back to the very same bytes.
func TestGroupMetadataVectors(t *testing.T) {
	for _, c := range loadGroupVectors(t).Cases {
		t.Run(c.Name, func(t *testing.T) {
			raw, err := hex.DecodeString(c.Hex)
			require.NoError(t, err)
			m, err := DecodeAgentMetadata(raw, V12)
			require.NoError(t, err)
			require.Equal(t, c.Value.metadata(t), m)
			require.NoError(t, m.Validate())
			l, err := LayoutOf(m, c.Geometry.geometry(c.PeerTP), c.Rank, c.PeerTP)
			require.NoError(t, err)
			want := c.Layout
			assert.Equal(t, want.Order, l.Order)
			assert.Equal(t, want.BlockSize, l.BlockSize)
			assert.Equal(t, want.NumBlocks, l.NumBlocks)
			assert.Equal(t, want.KVHeads, l.KVHeads)
			assert.Equal(t, want.HeadBytes, l.HeadBytes)
			assert.Equal(t, want.Groups, l.Groups)
			assert.Equal(t, nixl.VRAM, l.Mem)
			for i, r := range l.Regions {
				assert.Equal(t, descriptors.Region{Base: m.KVCachesBaseAddr[i], DevID: 1}, r)
			}
			back, err := MetadataOf(l, m.EngineID, m.AgentMetadata, m.AttnBackendName, c.KVLayout)
			require.NoError(t, err)
			assert.Equal(t, c.Hex, hex.EncodeToString(back.Encode(V12)), "the layout publishes the same bytes")
		})
	}
}

// TestGroupMetadataInvalidVectors: metadata that disagrees with the local
// model in a size the wire carries is refused with the vector's error.
func TestGroupMetadataInvalidVectors(t *testing.T) {
	for _, c := range loadGroupVectors(t).Invalid {
		t.Run(c.Name, func(t *testing.T) {
			raw, err := hex.DecodeString(c.Hex)
			require.NoError(t, err)
			m, err := DecodeAgentMetadata(raw, V12)
			require.NoError(t, err)
			require.NoError(t, m.Validate())
			_, err = LayoutOf(m, c.Geometry.geometry(c.PeerTP), c.Rank, c.PeerTP)
			require.ErrorIs(t, err, ErrIncompatible)
			assert.EqualError(t, err, c.Error)
		})
	}
}
