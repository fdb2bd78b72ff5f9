package vllm

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// versionVectors is testdata/vllm/versions.json, made by vLLM's own
// dataclasses, msgspec encoder and hash function (gen_vllm_vectors.py).
type versionVectors struct {
	Source        string `json:"source"`
	AgentMetadata []struct {
		Name    string           `json:"name"`
		Version int              `json:"version"`
		Value   versionedMDValue `json:"value"`
		Hex     string           `json:"hex"`
	} `json:"agent_metadata"`
	Payloads []struct {
		Name              string `json:"name"`
		Version           int    `json:"version"`
		CompatibilityHash string `json:"compatibility_hash"`
		AgentMetadataHex  string `json:"agent_metadata_hex"`
		Hex               string `json:"hex"`
	} `json:"handshake_payloads"`
	Hashes []struct {
		Name    string        `json:"name"`
		Version int           `json:"version"`
		Factors factorsVector `json:"factors"`
		JSON    string        `json:"json"`
		SHA256  string        `json:"sha256"`
	} `json:"hashes"`
}

// versionedMDValue is metadataValue with the keys of versions 13 to 16;
// the dicts are lists of pairs, in their insertion order.
type versionedMDValue struct {
	metadataValue
	PLEBlockLen         *uint64  `json:"ple_block_len"`
	LayerGroupIDs       [][2]any `json:"layer_group_ids"`
	PackedMemberLayouts [][3]any `json:"packed_member_layouts"`
}

func (v versionedMDValue) metadata(t *testing.T) *AgentMetadata {
	m := v.metadataValue.metadata(t)
	m.PLEBlockLen = v.PLEBlockLen
	for _, e := range v.LayerGroupIDs {
		m.LayerGroupIDs = append(m.LayerGroupIDs, LayerGroup{Layer: e[0].(string), Group: int(e[1].(float64))})
	}
	for _, e := range v.PackedMemberLayouts {
		m.PackedMemberLayouts = append(m.PackedMemberLayouts, PackedMember{Layer: e[0].(string), Offset: uint64(e[1].(float64)), PageLen: uint64(e[2].(float64))})
	}
	return m
}

func loadVersionVectors(t *testing.T) *versionVectors {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/vllm/versions.json")
	require.NoError(t, err)
	var v versionVectors
	require.NoError(t, json.Unmarshal(raw, &v))
	require.Contains(t, v.Source, "Made by vLLM's own code")
	return &v
}

// Every version's metadata encodes to vLLM's bytes and decodes back.
func TestVersionedMetadataVectors(t *testing.T) {
	vs := loadVersionVectors(t)
	seen := map[int]int{}
	for _, c := range vs.AgentMetadata {
		v := Version(c.Version)
		want := c.Value.metadata(t)
		require.Equal(t, c.Hex, hex.EncodeToString(want.Encode(v)), "%s at %d", c.Name, v)
		got, err := DecodeAgentMetadata(mustUnhex(t, c.Hex), v)
		require.NoError(t, err, "%s at %d", c.Name, v)
		require.Equal(t, want, got, "%s at %d", c.Name, v)
		seen[c.Version]++
	}
	require.Equal(t, map[int]int{13: 3, 14: 3, 15: 3, 16: 3}, seen)
}

// gonixl's hash is vLLM's compute_nixl_compatibility_hash at every
// version, the speculative factors included.
func TestVersionedHashVectors(t *testing.T) {
	vs := loadVersionVectors(t)
	require.Len(t, vs.Hashes, 12)
	for _, c := range vs.Hashes {
		f := c.Factors.factors()
		require.Equal(t, Version(c.Version), f.ConnectorVersion)
		require.Equal(t, c.JSON, f.JSON(), "%s at %d", c.Name, c.Version)
		require.Equal(t, c.SHA256, f.Hash(), "%s at %d", c.Name, c.Version)
	}
}

// A rank of a two-layer packed model, published at each version, serves
// byte for byte the payload vLLM's dataclasses encode for the same rank,
// and a decode engine fetching it gets the layout back (at 16, paired by
// layer name).
func TestPublishedPayloadVectors(t *testing.T) {
	vs := loadVersionVectors(t)
	g := descriptors.Geometry{Layers: 2, KVHeads: 2, HeadDim: 4, DType: "bfloat16", BlockSize: 16, Blocks: 4, TPSize: 1, KVPacked: true}
	l, err := g.Layout(nixl.VRAM, 0, nixl.Desc{Addr: 0x10000, Len: g.RankBytes()})
	require.NoError(t, err)
	require.Len(t, vs.Payloads, 4)
	for _, c := range vs.Payloads {
		v := Version(c.Version)
		s, err := ListenSide(DefaultSideHost, 0, SideOptions{})
		require.NoError(t, err)
		w := Wire{Version: v}
		require.NoError(t, PublishRank(s, "prefill", c.CompatibilityHash, w, l, []byte{0}, "FLASH_ATTN", ""))
		ctx := context.Background()
		h, err := FetchRanks(ctx, "127.0.0.1", s.Port(), []SideRank{{PP: 0, TP: 0}}, SideFetchOptions{Timeout: 5 * time.Second})
		require.NoError(t, err)
		require.Equal(t, c.Hex, hex.EncodeToString(h.Replies[0].Payload), "version %d", v)

		p, err := FetchPeer(ctx, "127.0.0.1", s.Port(), "prefill", c.CompatibilityHash, w, g, 1, []int{0}, SideFetchOptions{Timeout: 5 * time.Second})
		require.NoError(t, err, "version %d", v)
		require.Equal(t, l, p.Ranks[0].Layout, "version %d", v)
		require.NoError(t, s.Close())
	}
}
